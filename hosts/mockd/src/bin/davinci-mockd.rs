//! `davinci-mockd`: mock davinci devices served on Unix sockets. See `--help` and
//! `docs/operators.md`.
#![forbid(unsafe_code)]

fn main() {
    std::process::exit(davinci_mockd::cli::main());
}
