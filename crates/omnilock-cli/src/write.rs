//! `omnilock write PATH`: a fenced write for shell jobs. It reads stdin and
//! replaces PATH with it, unless a holder with a higher fencing token has
//! written PATH since: the job's lock was lost and a later holder has taken
//! over, so this job's output is refused (exit 73) and PATH keeps the later
//! holder's. The token comes from `--token` or `$OMNILOCK_TOKEN`, which
//! `omnilock run` gives the command it runs.

use std::io::Read;

use omnilock::ErrorKind;
use omnilock::fence::FencedFile;

use crate::args::WriteArgs;
use crate::exit;

/// Runs `omnilock write`; returns the exit status.
pub(crate) async fn write(args: WriteArgs) -> u8 {
    let token = match token(&args) {
        Ok(token) => token,
        Err(message) => {
            eprintln!("omnilock: {message}");
            return exit::USAGE;
        }
    };
    // The whole of stdin first: a job that fails half-way through its
    // output must not replace the file with half of it (the pipe's writer
    // cannot say so, but at least nothing is written before the end).
    let mut contents = Vec::new();
    if let Err(err) = std::io::stdin().read_to_end(&mut contents) {
        eprintln!("omnilock: cannot read stdin: {err}");
        return exit::IOERR;
    }
    let file = FencedFile::new(&args.path);
    let written = tokio::task::spawn_blocking(move || file.write(token, &contents)).await;
    match written {
        Ok(Ok(())) => 0,
        Ok(Err(err)) if err.kind() == ErrorKind::StaleToken => {
            eprintln!("omnilock: {err}");
            exit::CANTCREAT
        }
        // The message already names the OS's reason.
        Ok(Err(err)) if err.kind() == ErrorKind::InvalidConfig => {
            eprintln!("omnilock: {err}");
            exit::USAGE
        }
        Ok(Err(err)) => {
            eprintln!("omnilock: {err}");
            exit::IOERR
        }
        Err(err) => {
            eprintln!("omnilock: the write did not finish: {err}");
            exit::SOFTWARE
        }
    }
}

/// The token: `--token`, else `$OMNILOCK_TOKEN`; a message when neither is
/// a number.
fn token(args: &WriteArgs) -> Result<u64, String> {
    if let Some(token) = args.token {
        return Ok(token);
    }
    match std::env::var("OMNILOCK_TOKEN") {
        Ok(text) => text.trim().parse().map_err(|_| {
            format!("OMNILOCK_TOKEN is not a fencing token (a whole number): {text:?}")
        }),
        Err(_) => Err(
            "no fencing token: give --token, or run under `omnilock run`, \
                       which sets OMNILOCK_TOKEN"
                .to_string(),
        ),
    }
}
