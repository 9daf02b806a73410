// A Curator client for the interoperation test (tests/curator.rs): takes a
// Curator mutex, semaphore permit, read lock or write lock on one path again
// and again, and while holding it marks the shared directory the same way
// the omnilock side does. Any overlap the lock should have prevented is a
// VIOLATION (exit 3).
//
// java CuratorDriver <connect> <path> <mutex|semaphore:N|read|write> <rounds> <dir>

import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.UUID;
import java.util.stream.Stream;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.ExponentialBackoffRetry;

public class CuratorDriver {
    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String path = args[1];
        String mode = args[2];
        int rounds = Integer.parseInt(args[3]);
        Path dir = Paths.get(args[4]);
        CuratorFramework client = CuratorFrameworkFactory.newClient(
            connect, 15000, 5000, new ExponentialBackoffRetry(100, 5));
        client.start();
        client.blockUntilConnected();
        System.out.println("STARTED");
        System.out.flush();
        InterProcessReadWriteLock rw = new InterProcessReadWriteLock(client, path);
        for (int i = 0; i < rounds; i++) {
            if (mode.equals("mutex")) {
                InterProcessMutex mutex = new InterProcessMutex(client, path);
                mutex.acquire();
                try { slot(dir, 1); } finally { mutex.release(); }
            } else if (mode.startsWith("semaphore:")) {
                int permits = Integer.parseInt(mode.substring("semaphore:".length()));
                InterProcessSemaphoreV2 semaphore = new InterProcessSemaphoreV2(client, path, permits);
                Lease lease = semaphore.acquire();
                try { slot(dir, permits); } finally { semaphore.returnLease(lease); }
            } else if (mode.equals("read")) {
                rw.readLock().acquire();
                try { read(dir); } finally { rw.readLock().release(); }
            } else if (mode.equals("write")) {
                rw.writeLock().acquire();
                try { write(dir); } finally { rw.writeLock().release(); }
            } else {
                throw new IllegalArgumentException("unknown mode " + mode);
            }
        }
        System.out.println("DONE " + rounds);
        client.close();
    }

    static void violation(String what) {
        System.out.println("VIOLATION " + what);
        System.out.flush();
        System.exit(3);
    }

    static void hold() throws InterruptedException {
        Thread.sleep(3);
    }

    /** One of `permits` slot files, created exclusively. */
    static void slot(Path dir, int permits) throws Exception {
        for (int k = 0; k < permits; k++) {
            Path slot = dir.resolve("slot-" + k);
            try {
                Files.createFile(slot);
            } catch (FileAlreadyExistsException taken) {
                continue;
            }
            hold();
            Files.delete(slot);
            return;
        }
        violation("more than " + permits + " holders");
    }

    static void read(Path dir) throws Exception {
        Path mine = dir.resolve("reader-" + UUID.randomUUID());
        Files.createFile(mine);
        if (Files.exists(dir.resolve("writer"))) violation("a reader beside a writer");
        hold();
        Files.delete(mine);
    }

    static void write(Path dir) throws Exception {
        Path writer = dir.resolve("writer");
        try {
            Files.createFile(writer);
        } catch (FileAlreadyExistsException other) {
            violation("two writers");
        }
        try (Stream<Path> files = Files.list(dir)) {
            if (files.anyMatch(f -> f.getFileName().toString().startsWith("reader-"))) {
                violation("a writer beside a reader");
            }
        }
        hold();
        Files.delete(writer);
    }
}
