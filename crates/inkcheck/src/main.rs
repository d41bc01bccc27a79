//! `inkcheck`: the consistency checker's command line. Exits with status 3 when it found
//! violations, 1 on an error.

use clap::Parser;
use inkcheck::CheckConfig;

#[derive(Parser)]
#[command(
    name = "inkcheck",
    version,
    about = "Consistency check: writers over TCP, readers over UDP on a small hot key set; reports \
             every read that returned a stale or expired value. Exits with status 3 on violations."
)]
struct Cli {
    #[command(flatten)]
    cfg: CheckConfig,
    /// Print one JSON object instead of the summary.
    #[arg(long)]
    json: bool,
}

fn main() {
    let cli = Cli::parse();
    let rep = match inkcheck::run(&cli.cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("inkcheck: error: {e:#}");
            std::process::exit(1);
        }
    };
    if cli.json {
        match serde_json::to_string(&rep) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("inkcheck: error: {e:#}");
                std::process::exit(1);
            }
        }
    } else {
        print!("{}", rep.summary());
    }
    if !rep.passed() {
        std::process::exit(3);
    }
}
