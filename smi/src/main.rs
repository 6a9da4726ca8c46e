//! davinci-smi: the operators' CLI to query and set device sharing and see who uses a device.

fn main() {}
