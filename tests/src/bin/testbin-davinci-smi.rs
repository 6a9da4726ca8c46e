//! `davinci-smi` for the tests: the same `main` as the installed binary (see
//! `davinci_tests::mockd` for why it has its own name).
#![forbid(unsafe_code)]

fn main() {
    std::process::exit(davinci_smi::main());
}
