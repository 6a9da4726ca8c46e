//! davinci-smi: the operators' CLI to query and set device sharing and see who uses a device.
//! See `davinci-smi --help` and docs/operators.md.
#![forbid(unsafe_code)]

fn main() {
    std::process::exit(davinci_smi::main());
}
