//! See the library's documentation and `--help`.
#![forbid(unsafe_code)]

fn main() {
    std::process::exit(davinci_exporter::main());
}
