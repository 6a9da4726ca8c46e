//! See the library's documentation and `--help`.

fn main() {
    std::process::exit(davinci_device_plugin::main());
}
