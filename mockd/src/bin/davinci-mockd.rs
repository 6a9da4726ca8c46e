//! `davinci-mockd`: mock davinci devices served on Unix sockets. See `--help` and
//! `docs/operators.md`.

fn main() {
    std::process::exit(davinci_mockd::cli::main());
}
