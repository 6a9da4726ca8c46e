//! Compiles the vendored kubelet device-plugin API (proto/deviceplugin/v1beta1/api.proto)
//! with protox (pure Rust: no system `protoc`) and generates the tonic server and client.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/deviceplugin/v1beta1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    tonic_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
