//! Fenced sinks: resources that refuse a write carrying a fencing token
//! lower than the highest they have already accepted, so a holder that
//! lost its lock without knowing (a pause, a partition, an expired lease)
//! cannot overwrite what a later holder wrote. See
//! [docs/fencing.md](https://github.com/omnilock/omnilock/blob/main/docs/fencing.md).
//!
//! The rule for every sink: a write with token `t` is accepted when `t` is
//! at least the highest token accepted before (so one holder may write as
//! often as it likes), and refused with [`ErrorKind::StaleToken`] when it
//! is lower; a refused write changes nothing. A holder that reads before it
//! writes reads with its token too, which raises the fence: a predecessor
//! that lost the lock but has not written yet is then refused, instead of
//! writing between this holder's read and its write.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};

/// A local file written only by the current holder of a lock: each write
/// replaces the whole file atomically (a new file renamed over it), and is
/// refused when its token is lower than the highest one that wrote the
/// file before.
///
/// The highest token is kept beside the file, in `<file>.fence`, and every
/// write runs under an exclusive advisory lock of `<file>.fence.lock`
/// (`flock` on Unix), so writers in other processes on the machine take
/// their turns and none can slip a stale write between another's check and
/// its rename. The fence is written (and synced) before the data, so a
/// crash between the two leaves the newer token guarding the older data,
/// never the other way round. Writers that bypass this type (or a network
/// file system without working `flock`) are not fenced.
///
/// A replaced file keeps its permissions; its owner becomes the writer.
/// The calls block on file I/O; in async code, run them with
/// `tokio::task::spawn_blocking`.
///
/// ```
/// use omnilock_core::{ErrorKind, fence::FencedFile};
/// # let dir = std::env::temp_dir().join(format!("fenced-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir).unwrap();
/// let report = FencedFile::new(dir.join("report.csv"));
/// report.write(7, b"written by the holder of token 7\n")?;
/// report.write(7, b"the same holder writes again\n")?;
/// report.write(9, b"a later holder\n")?;
/// // The holder of token 7 comes back from a long pause: refused.
/// let stale = report.write(7, b"stale\n").unwrap_err();
/// assert_eq!(stale.kind(), ErrorKind::StaleToken);
/// assert_eq!(stale.tokens(), Some((7, 9)));
/// assert_eq!(std::fs::read(report.path())?, b"a later holder\n");
/// // A read-modify-write reads with its token: the fence rises to 10 and
/// // the holder of token 9 can no longer write.
/// let seen = report.read(10)?;
/// assert_eq!(seen.as_deref(), Some(&b"a later holder\n"[..]));
/// assert_eq!(report.write(9, b"late\n").unwrap_err().tokens(), Some((9, 10)));
/// # std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct FencedFile {
    path: PathBuf,
    fence: PathBuf,
    lock: PathBuf,
}

impl FencedFile {
    /// The fenced file at `path` (nothing is touched until a call).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        let path = path.into();
        let beside = |suffix: &str| {
            let mut name = path.clone().into_os_string();
            name.push(suffix);
            PathBuf::from(name)
        };
        FencedFile {
            fence: beside(".fence"),
            lock: beside(".fence.lock"),
            path,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The highest token that wrote or read the file, or `None` before the
    /// first fenced write or read.
    pub fn fence(&self) -> Result<Option<u64>> {
        let _turn = self.turn()?;
        self.read_fence()
    }

    /// Replaces the file's contents with `contents` if `token` is at least
    /// the highest token that wrote it before; otherwise changes nothing and
    /// fails with [`ErrorKind::StaleToken`] (see [`Error::tokens`]).
    pub fn write(&self, token: u64, contents: &[u8]) -> Result<()> {
        // Before anything is created beside it: a directory cannot be
        // replaced by a file.
        if self.path.is_dir() {
            return Err(Error::config(format!(
                "{} is a directory, not a file to write",
                self.path.display()
            )));
        }
        let _turn = self.turn()?;
        if let Some(highest) = self.read_fence()?
            && token < highest
        {
            return Err(Error::stale_token(token, highest).with_lock(self.shown()));
        }
        replace(&self.fence, format!("{token}\n").as_bytes())
            .map_err(|e| self.io("record the fence of", e))?;
        replace(&self.path, contents).map_err(|e| self.io("write", e))
    }

    /// Reads the file for a holder with `token` that will write it back:
    /// raises the fence to `token` first, so that from now on a write with
    /// a lower token is refused. A read-modify-write needs it: a holder
    /// that lost its lock but has not written yet would otherwise slip its
    /// write in before this one's, and this one would then overwrite it
    /// unseen. Fails with [`ErrorKind::StaleToken`] when a higher token has
    /// read or written the file; `Ok(None)` when the file does not exist.
    pub fn read(&self, token: u64) -> Result<Option<Vec<u8>>> {
        let _turn = self.turn()?;
        match self.read_fence()? {
            Some(highest) if token < highest => {
                return Err(Error::stale_token(token, highest).with_lock(self.shown()));
            }
            Some(highest) if token == highest => {}
            _ => replace(&self.fence, format!("{token}\n").as_bytes())
                .map_err(|e| self.io("record the fence of", e))?,
        }
        match fs::read(&self.path) {
            Ok(contents) => Ok(Some(contents)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io("read", e)),
        }
    }

    /// This process's turn: the exclusive lock of the lock file, released
    /// when the returned file closes.
    fn turn(&self) -> Result<File> {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&self.lock)
            .map_err(|e| self.io("open the lock file of", e))?;
        file.lock().map_err(|e| self.io("lock", e))?;
        Ok(file)
    }

    fn read_fence(&self) -> Result<Option<u64>> {
        match fs::read_to_string(&self.fence) {
            Ok(text) => text.trim().parse().map(Some).map_err(|_| {
                Error::new(
                    ErrorKind::Backend,
                    format!(
                        "the fence {} does not hold a token ({:?}); it was written by \
                         something else",
                        self.fence.display(),
                        text.chars().take(40).collect::<String>()
                    ),
                )
            }),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io("read the fence of", e)),
        }
    }

    fn shown(&self) -> String {
        self.path.display().to_string()
    }

    fn io(&self, what: &str, e: io::Error) -> Error {
        Error::new(
            ErrorKind::Backend,
            format!("could not {what} {}: {e}", self.path.display()),
        )
        .with_cause(e)
    }
}

/// Replaces `path` with `contents` atomically: a new file beside it,
/// synced, renamed over it, and the directory synced so the rename lasts.
fn replace(path: &Path, contents: &[u8]) -> io::Result<()> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let mut temporary = name.to_os_string();
    temporary.push(format!(".{}.tmp", std::process::id()));
    let temporary = dir.join(temporary);
    let written = (|| {
        let mut file = File::create(&temporary)?;
        // The replacement keeps the replaced file's permissions (a report
        // made readable to a group stays so); its owner is the writer.
        if let Ok(existing) = fs::metadata(path) {
            file.set_permissions(existing.permissions())?;
        }
        file.write_all(contents)?;
        file.sync_all()?;
        fs::rename(&temporary, path)
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
        return written;
    }
    // Directories cannot be opened for syncing everywhere (Windows); the
    // rename itself is atomic either way.
    if let Ok(dir) = File::open(dir) {
        let _ = dir.sync_all();
    }
    Ok(())
}
