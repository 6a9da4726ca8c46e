//! Compiles the kubelet's pod-resources API (the part the exporter uses,
//! proto/podresources/v1/api.proto) with protox (pure Rust: no system `protoc`) and
//! generates the tonic client (and the server, for the tests' stand-in kubelet).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/podresources/v1/api.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    tonic_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
