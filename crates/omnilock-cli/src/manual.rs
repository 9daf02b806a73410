//! Shell completions and the manual page, generated from the argument
//! definitions so that they never drift from `--help`.

use std::io::Write;
use std::path::Path;

use clap::CommandFactory;

use crate::args::Cli;
use crate::exit;

/// `omnilock completions SHELL`: the script on stdout.
pub(crate) fn print_completions(shell: clap_complete::Shell) -> u8 {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "omnilock", &mut out);
    emit(&out)
}

/// `omnilock man [DIR]`: the main page on stdout, or every page (the main
/// one and one per subcommand, `omnilock-run.1` and so on) written to DIR.
pub(crate) fn print_man_page(dir: Option<&Path>) -> u8 {
    let command = Cli::command();
    if let Some(dir) = dir {
        return match clap_mangen::generate_to(command, dir) {
            Ok(()) => 0,
            Err(err) => {
                eprintln!(
                    "omnilock: cannot write the manual pages to {}: {err}",
                    dir.display()
                );
                exit::CANTCREAT
            }
        };
    }
    let mut out = Vec::new();
    if let Err(err) = clap_mangen::Man::new(command).render(&mut out) {
        eprintln!("omnilock: cannot render the manual page: {err}");
        return exit::SOFTWARE;
    }
    emit(&out)
}

/// Writes `bytes` to stdout; a closed pipe (`| head`) is not an error.
fn emit(bytes: &[u8]) -> u8 {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Ok(()) => 0,
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => 0,
        Err(err) => {
            eprintln!("omnilock: cannot write to stdout: {err}");
            exit::IOERR
        }
    }
}
