//! The `parasol` binary: argument parsing and logger set-up; everything else is in the library.

fn main() {
    let args: parasol::cli::Cli = argh::from_env();
    std::process::exit(parasol::cli::main(args));
}
