//! gRPC over Unix sockets, as the kubelet speaks it: a listener to serve on and a client
//! channel to a socket path (the plugin uses both; so does the test's kubelet stand-in).
#![forbid(unsafe_code)]

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::{Channel, Endpoint, Uri};

/// Listens on a new Unix socket at `path` (which must not exist); the stream of connections
/// to hand to `tonic::transport::Server::serve_with_incoming*`. Must be called inside a
/// Tokio runtime.
///
/// # Errors
/// The socket cannot be created (the path exists, the directory is missing or not
/// writable).
pub fn listen(path: &Path) -> io::Result<UnixListenerStream> {
    Ok(UnixListenerStream::new(UnixListener::bind(path)?))
}

/// A channel to the gRPC server on the Unix socket at `path`, connected within `timeout`.
///
/// # Errors
/// Nothing listens there, or the connection does not complete in time.
pub async fn connect(path: &Path, timeout: Duration) -> Result<Channel, tonic::transport::Error> {
    let path: PathBuf = path.to_path_buf();
    // The URI is not used to connect (the connector ignores it) but must be valid.
    Endpoint::from_static("http://localhost")
        .connect_timeout(timeout)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { Ok::<_, io::Error>(TokioIo::new(UnixStream::connect(path).await?)) }
        }))
        .await
}
