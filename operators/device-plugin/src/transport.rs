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
/// Tokio runtime. The socket's mode is 0600 whatever the umask: only its owner (root, as
/// the kubelet) may connect.
///
/// # Errors
/// The socket cannot be created (the path exists, the directory is missing or not
/// writable), or its mode cannot be set (the socket is removed again).
pub fn listen(path: &Path) -> io::Result<UnixListenerStream> {
    use std::os::unix::fs::PermissionsExt;
    let l = UnixListener::bind(path)?;
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(UnixListenerStream::new(l))
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

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_socket_is_0600_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("dp-sock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("plugin.sock");
        let _ = std::fs::remove_file(&path);
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::empty());
        let l = super::listen(&path);
        nix::sys::stat::umask(old);
        let _l = l.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(mode, 0o600);
    }
}
