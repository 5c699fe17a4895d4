use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::Parser;
use kubectl_cmset::cli::Cli;
use kubectl_cmset::style::{Palette, use_color};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let color = use_color(
        cli.global.color,
        std::io::stdout().is_terminal(),
        std::env::var("NO_COLOR").ok().as_deref(),
    );
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let now = jiff::Timestamp::now();
    match runtime.block_on(kubectl_cmset::run(cli, Palette { color }, now)) {
        Ok(outcome) => {
            // With colour off, anstream also strips any escape sequence, so a pipe never receives one.
            let choice = if color {
                anstream::ColorChoice::Always
            } else {
                anstream::ColorChoice::Never
            };
            let mut stdout = anstream::AutoStream::new(std::io::stdout().lock(), choice);
            let written = stdout
                .write_all(outcome.stdout.as_bytes())
                .and_then(|()| stdout.flush());
            if let Err(e) = written
                && e.kind() != std::io::ErrorKind::BrokenPipe
            {
                eprintln!("error: writing the output: {e}");
                return ExitCode::from(2);
            }
            if let Some(note) = outcome.note {
                eprintln!("{note}");
            }
            ExitCode::from(outcome.code)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
