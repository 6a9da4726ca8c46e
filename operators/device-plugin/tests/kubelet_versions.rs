//! The plugin as kubelets of different versions drive it: the real `davinci-device-plugin`
//! process, devices served in-process by `davinci-mockd`'s daemon, and a kubelet stand-in
//! that serves the Registration service the plugin registers with and then calls the
//! plugin back as that kubelet version would.
//!
//! * **1.25** (any kubelet before 1.26): grpc-go dials the plugin's socket by its path, with
//!   no `unix:` scheme, and sends that path as the HTTP/2 `:authority`
//!   (kubernetes#109081, fixed in 1.26 by `grpc.WithAuthority("localhost")`). No Rust
//!   gRPC client sends such an authority (`http::Uri` cannot hold one), so this stand-in
//!   speaks HTTP/2 itself ([`grpc_go_125`]), as grpc-go puts it on the wire. It reads the
//!   environment, mounts, device nodes and annotations of Allocate; a 1.25 kubelet has no
//!   `cdi_devices` (the field came in 1.28).
//! * **1.29**: authority `localhost` (a tonic client); it reads `cdi_devices` too (the
//!   `DevicePluginCDIDevices` feature gate is on by default from 1.29).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use davinci_device_plugin::api::device_plugin_client::DevicePluginClient;
use davinci_device_plugin::api::registration_server::{Registration, RegistrationServer};
use davinci_device_plugin::api::{
    AllocateRequest, AllocateResponse, ContainerAllocateRequest,
    ContainerPreferredAllocationRequest, DevicePluginOptions, Empty, ListAndWatchResponse,
    PreferredAllocationRequest, RegisterRequest,
};
use davinci_device_plugin::transport;
use davinci_mockd::daemon::{Daemon, DaemonConfig};
use tokio::sync::{mpsc, oneshot};
use tonic::{Request, Response, Status};

/// How long any one thing may take.
const WAIT: Duration = Duration::from_secs(20);

/// A temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "davinci-dpk-{}-{}-{tag}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Two mock devices in `dir`, davinci0 and davinci1, in exclusive mode (one ID each).
fn devices(dir: &Path) -> Daemon {
    Daemon::start(&DaemonConfig {
        devices: 2,
        socket_dir: dir.to_path_buf().into(),
        ..DaemonConfig::default()
    })
    .expect("the mock devices start")
}

/// The IDs of the devices of `devs` in exclusive mode: `UUID::0`, the UUID their
/// GET_IDENTITY reports.
fn uuid_ids(devs: &Daemon) -> Vec<String> {
    devs.sockets()
        .iter()
        .map(|s| {
            let c = davinci_shim::Control::open(&format!("mock:{}", s.display())).unwrap();
            format!("{}::0", c.identity().unwrap().uuid_string())
        })
        .collect()
}

/// The kubelet's Registration service: passes every request on.
struct Standin(mpsc::UnboundedSender<RegisterRequest>);

#[tonic::async_trait]
impl Registration for Standin {
    async fn register(&self, r: Request<RegisterRequest>) -> Result<Response<Empty>, Status> {
        let _ = self.0.send(r.into_inner());
        Ok(Response::new(Empty {}))
    }
}

/// The kubelet's registration socket, `DIR/kubelet.sock`, served until drop.
struct Kubelet {
    registrations: mpsc::UnboundedReceiver<RegisterRequest>,
    _stop: oneshot::Sender<()>,
}

impl Kubelet {
    fn start(dir: &Path) -> Kubelet {
        let (tx, registrations) = mpsc::unbounded_channel();
        let (stop, rx) = oneshot::channel::<()>();
        let incoming = transport::listen(&dir.join("kubelet.sock")).unwrap();
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RegistrationServer::new(Standin(tx)))
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                }),
        );
        Kubelet {
            registrations,
            _stop: stop,
        }
    }

    async fn registration(&mut self) -> RegisterRequest {
        tokio::time::timeout(WAIT, self.registrations.recv())
            .await
            .expect("no registration in time")
            .expect("the stand-in ended")
    }
}

/// The plugin process, its stderr echoed and kept; killed on drop.
struct Plugin {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Plugin {
    fn start(kubelet_dir: &Path, socket_dir: &Path, args: &[&str]) -> Plugin {
        let mut child = Command::new(env!("CARGO_BIN_EXE_davinci-device-plugin"))
            .arg("--kubelet-dir")
            .arg(kubelet_dir)
            .arg("--socket-dir")
            .arg(socket_dir)
            .args(["--health-interval", "100ms", "--kubelet-poll", "100ms"])
            .args(args)
            .env("RUST_LOG", "info,h2=debug")
            .env_remove("DAVINCI_DEVICE")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start davinci-device-plugin");
        let err = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let l = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                eprintln!("[plugin] {line}");
                let mut l = l.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
            }
        });
        Plugin { child, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn want_options() -> DevicePluginOptions {
    DevicePluginOptions {
        pre_start_required: false,
        get_preferred_allocation_available: true,
    }
}

fn allocate_req(ids: &[&str]) -> AllocateRequest {
    AllocateRequest {
        container_requests: vec![ContainerAllocateRequest {
            devices_ids: ids.iter().map(|s| s.to_string()).collect(),
        }],
    }
}

fn ids(l: &ListAndWatchResponse) -> Vec<&str> {
    l.devices.iter().map(|d| d.id.as_str()).collect()
}

/// A kubelet before 1.26 on the wire: grpc-go's HTTP/2 client dialling a Unix socket by
/// its path, which it sends as `:authority`. Enough HTTP/2 for gRPC calls (RFC 9113):
/// the preface, SETTINGS and PING acknowledged, header blocks as HPACK literals (RFC 7541
/// §6.2.2, no Huffman coding, no table), DATA credited back with WINDOW_UPDATE; a stream
/// reset or a GOAWAY is an error naming its code. Response headers are not decoded (the
/// server's HPACK), so a call that fails without a reset is one with no message.
mod grpc_go_125 {
    use std::collections::HashMap;
    use std::io::{self, Read, Write};
    use std::os::unix::net::UnixStream;
    use std::path::Path;
    use std::time::Duration;

    const DATA: u8 = 0;
    const HEADERS: u8 = 1;
    const RST_STREAM: u8 = 3;
    const SETTINGS: u8 = 4;
    const PING: u8 = 6;
    const GOAWAY: u8 = 7;
    const WINDOW_UPDATE: u8 = 8;
    const CONTINUATION: u8 = 9;
    const END_STREAM: u8 = 0x1;
    const ACK: u8 = 0x1;
    const END_HEADERS: u8 = 0x4;

    #[derive(Default)]
    struct StreamState {
        data: Vec<u8>,
        ended: bool,
    }

    /// One connection, as grpc-go's `ClientConn` to `/path/to/plugin.sock`.
    pub struct Conn {
        sock: UnixStream,
        authority: String,
        next_id: u32,
        streams: HashMap<u32, StreamState>,
    }

    fn code_name(code: u32) -> &'static str {
        match code {
            0 => "NO_ERROR",
            1 => "PROTOCOL_ERROR",
            2 => "INTERNAL_ERROR",
            7 => "REFUSED_STREAM",
            8 => "CANCEL",
            _ => "other",
        }
    }

    /// A 32-bit big-endian field (`u32::MAX` if the frame is too short for it).
    fn be32(b: Option<&[u8]>) -> u32 {
        b.and_then(|b| b.try_into().ok())
            .map_or(u32::MAX, u32::from_be_bytes)
    }

    /// An HPACK string literal, not Huffman-coded (7-bit prefix length).
    fn string(out: &mut Vec<u8>, s: &str) {
        let mut n = s.len();
        if n < 127 {
            out.push(n as u8);
        } else {
            out.push(127);
            n -= 127;
            while n >= 128 {
                out.push((n % 128) as u8 | 0x80);
                n /= 128;
            }
            out.push(n as u8);
        }
        out.extend_from_slice(s.as_bytes());
    }

    impl Conn {
        /// Connects to `sock` and sends `:authority` = its path, as grpc-go did for a
        /// target with no scheme.
        pub fn connect(sock: &Path, timeout: Duration) -> io::Result<Conn> {
            Conn::with_authority(sock, &sock.display().to_string(), timeout)
        }

        /// Connects to `sock`, sending `authority` as `:authority`.
        pub fn with_authority(sock: &Path, authority: &str, timeout: Duration) -> io::Result<Conn> {
            let s = UnixStream::connect(sock)?;
            s.set_read_timeout(Some(timeout))?;
            let mut c = Conn {
                sock: s,
                authority: authority.to_string(),
                next_id: 1,
                streams: HashMap::new(),
            };
            c.sock.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")?;
            c.frame(SETTINGS, 0, 0, &[])?;
            Ok(c)
        }

        fn frame(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) -> io::Result<()> {
            let n = payload.len() as u32;
            let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
            f.extend_from_slice(&stream.to_be_bytes());
            f.extend_from_slice(payload);
            self.sock.write_all(&f)
        }

        /// Starts a call of `method` (`/package.Service/Method`) with one request message;
        /// returns the stream.
        pub fn call(&mut self, method: &str, msg: &impl prost::Message) -> io::Result<u32> {
            let id = self.next_id;
            self.next_id += 2;
            let mut block = Vec::new();
            for (k, v) in [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", method),
                (":authority", &self.authority.clone()),
                ("content-type", "application/grpc"),
                ("user-agent", "grpc-go/1.47.0"),
                ("te", "trailers"),
            ] {
                block.push(0x00); // literal without indexing, new name
                string(&mut block, k);
                string(&mut block, v);
            }
            self.frame(HEADERS, END_HEADERS, id, &block)?;
            let body = msg.encode_to_vec();
            let mut data = vec![0u8];
            data.extend_from_slice(&(body.len() as u32).to_be_bytes());
            data.extend_from_slice(&body);
            self.frame(DATA, END_STREAM, id, &data)?;
            self.streams.insert(id, StreamState::default());
            Ok(id)
        }

        /// Reads one frame and acts on it.
        fn read_frame(&mut self) -> Result<(), String> {
            let mut h = [0u8; 9];
            self.sock
                .read_exact(&mut h)
                .map_err(|e| format!("reading a frame: {e}"))?;
            let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
            let (kind, flags) = (h[3], h[4]);
            let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
            let mut p = vec![0u8; len];
            self.sock
                .read_exact(&mut p)
                .map_err(|e| format!("reading a frame: {e}"))?;
            let io = |e: io::Error| format!("writing a frame: {e}");
            match kind {
                SETTINGS if flags & ACK == 0 => self.frame(SETTINGS, ACK, 0, &[]).map_err(io)?,
                PING if flags & ACK == 0 => self.frame(PING, ACK, 0, &p).map_err(io)?,
                GOAWAY => {
                    let code = be32(p.get(4..8));
                    return Err(format!("GOAWAY {} ({code})", code_name(code)));
                }
                RST_STREAM => {
                    let code = be32(p.get(0..4));
                    return Err(format!(
                        "stream {stream}: RST_STREAM {} ({code})",
                        code_name(code)
                    ));
                }
                DATA => {
                    if len > 0 {
                        let credit = (len as u32).to_be_bytes();
                        self.frame(WINDOW_UPDATE, 0, 0, &credit).map_err(io)?;
                        self.frame(WINDOW_UPDATE, 0, stream, &credit).map_err(io)?;
                    }
                    let s = self.streams.entry(stream).or_default();
                    s.data.extend_from_slice(&p);
                    s.ended |= flags & END_STREAM != 0;
                }
                HEADERS | CONTINUATION => {
                    self.streams.entry(stream).or_default().ended |= flags & END_STREAM != 0;
                }
                _ => {}
            }
            Ok(())
        }

        /// The next message of `stream`, reading frames until it is there; `Ok(None)` when
        /// the stream ended without one (a gRPC error status, in trailers not decoded here).
        pub fn message<M: prost::Message + Default>(
            &mut self,
            stream: u32,
        ) -> Result<Option<M>, String> {
            loop {
                let s = self.streams.entry(stream).or_default();
                if s.data.len() >= 5 {
                    let n = u32::from_be_bytes([s.data[1], s.data[2], s.data[3], s.data[4]]);
                    let n = n as usize;
                    if s.data.len() >= 5 + n {
                        let m = M::decode(&s.data[5..5 + n]).map_err(|e| e.to_string())?;
                        s.data.drain(..5 + n);
                        return Ok(Some(m));
                    }
                }
                if s.ended {
                    return Ok(None);
                }
                self.read_frame()?;
            }
        }

        /// A unary call: its one response message.
        pub fn unary<M: prost::Message + Default>(
            &mut self,
            method: &str,
            msg: &impl prost::Message,
        ) -> Result<M, String> {
            let id = self
                .call(method, msg)
                .map_err(|e| format!("{method}: {e}"))?;
            self.message(id)
                .map_err(|e| format!("{method}: {e}"))?
                .ok_or_else(|| format!("{method}: no response message (an error status)"))
        }
    }
}

/// What a 1.25 kubelet does once the plugin registered, on one connection as grpc-go
/// would: GetDevicePluginOptions, ListAndWatch (the first list), then Allocate of `alloc`
/// while the list stream stays open. Returns (options, first list, Allocate's response).
fn kubelet_125(
    sock: &Path,
    alloc: &[&str],
) -> Result<(DevicePluginOptions, ListAndWatchResponse, AllocateResponse), String> {
    let mut c = grpc_go_125::Conn::connect(sock, WAIT).map_err(|e| e.to_string())?;
    let options: DevicePluginOptions =
        c.unary("/v1beta1.DevicePlugin/GetDevicePluginOptions", &Empty {})?;
    let watch = c
        .call("/v1beta1.DevicePlugin/ListAndWatch", &Empty {})
        .map_err(|e| e.to_string())?;
    let list: ListAndWatchResponse = c
        .message(watch)
        .map_err(|e| format!("ListAndWatch: {e}"))?
        .ok_or("ListAndWatch ended without a list")?;
    let resp: AllocateResponse = c.unary("/v1beta1.DevicePlugin/Allocate", &allocate_req(alloc))?;
    Ok((options, list, resp))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_before_1_26_sending_the_socket_path_as_authority_is_served() {
    let devs_dir = TempDir::new("devs");
    let devs = devices(&devs_dir.0);
    let sock0 = devs.sockets()[0].display().to_string();
    let want_ids = uuid_ids(&devs);
    for cdi in [false, true] {
        let k8s = TempDir::new("k125");
        let mut kubelet = Kubelet::start(&k8s.0);
        let args: &[&str] = if cdi { &["--cdi"] } else { &[] };
        let plugin = Plugin::start(&k8s.0, &devs_dir.0, args);
        let r = kubelet.registration().await;
        assert_eq!(r.options, Some(want_options()));
        let sock = k8s.0.join(&r.endpoint);
        let first = want_ids[0].clone();
        let got = tokio::task::spawn_blocking(move || kubelet_125(&sock, &[first.as_str()]))
            .await
            .unwrap();
        let (options, list, resp) = got.unwrap_or_else(|e| {
            panic!(
                "a 1.25 kubelet's calls failed: {e}\nthe plugin's log:\n{}",
                plugin.log()
            )
        });
        assert_eq!(options, want_options());
        assert_eq!(ids(&list), want_ids);
        assert_eq!(resp.container_responses.len(), 1);
        let a = &resp.container_responses[0];
        let mock0 = format!("mock:{sock0}");
        assert_eq!(a.envs["DAVINCI_DEVICE"], mock0);
        assert_eq!(a.envs["DAVINCI_VISIBLE_DEVICES"], mock0);
        if cdi {
            // A 1.25 kubelet knows no cdi_devices: the runtime reads the CDI annotation.
            assert!(a.mounts.is_empty() && a.devices.is_empty(), "{a:?}");
            let want: HashMap<String, String> = [(
                "cdi.k8s.io/davinci-device-plugin_davinci0".to_string(),
                "davinci.ai/npu=davinci0".to_string(),
            )]
            .into();
            assert_eq!(a.annotations, want);
        } else {
            assert_eq!(a.mounts.len(), 1, "{a:?}");
            assert_eq!(a.mounts[0].host_path, sock0);
            assert_eq!(a.mounts[0].container_path, sock0);
            assert!(a.annotations.is_empty(), "{a:?}");
            // Only a path is taken as no authority: other malformed ones are still refused.
            let sock = k8s.0.join(&r.endpoint);
            let refused = tokio::task::spawn_blocking(move || {
                let mut c = grpc_go_125::Conn::with_authority(&sock, "not an authority", WAIT)
                    .map_err(|e| e.to_string())?;
                c.unary::<DevicePluginOptions>(
                    "/v1beta1.DevicePlugin/GetDevicePluginOptions",
                    &Empty {},
                )
            })
            .await
            .unwrap();
            let e = refused.unwrap_err();
            assert!(e.contains("RST_STREAM PROTOCOL_ERROR"), "{e}");
        }
    }
    devs.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_29_kubelet_gets_cdi_devices_and_the_annotation() {
    let devs_dir = TempDir::new("devs");
    let devs = devices(&devs_dir.0);
    let k8s = TempDir::new("k129");
    let mut kubelet = Kubelet::start(&k8s.0);
    let plugin = Plugin::start(&k8s.0, &devs_dir.0, &["--cdi"]);
    let want_ids = uuid_ids(&devs);
    let r = kubelet.registration().await;
    assert_eq!(r.version, "v1beta1");
    assert_eq!(r.options, Some(want_options()));
    // grpc-go with WithAuthority("localhost"), as a tonic client sends it.
    let channel = transport::connect(&k8s.0.join(&r.endpoint), WAIT)
        .await
        .unwrap();
    let mut c = DevicePluginClient::new(channel);
    let o = c.get_device_plugin_options(Empty {}).await.unwrap();
    assert_eq!(o.into_inner(), want_options());
    let mut stream = c.list_and_watch(Empty {}).await.unwrap().into_inner();
    let list = tokio::time::timeout(WAIT, stream.message())
        .await
        .expect("a list in time")
        .unwrap()
        .expect("a list");
    assert_eq!(ids(&list), want_ids);
    assert!(
        list.devices.iter().all(|d| d.health == "Healthy"),
        "{list:?}"
    );
    // Mock devices have no NUMA node: no topology (the kubelet's "no preference").
    assert!(
        list.devices.iter().all(|d| d.topology.is_none()),
        "{list:?}"
    );
    // GetPreferredAllocation (1.19+), then Allocate of what it preferred.
    let p = c
        .get_preferred_allocation(PreferredAllocationRequest {
            container_requests: vec![ContainerPreferredAllocationRequest {
                available_device_i_ds: want_ids.clone(),
                must_include_device_i_ds: vec![want_ids[1].clone()],
                allocation_size: 2,
            }],
        })
        .await
        .unwrap()
        .into_inner();
    let chosen = &p.container_responses[0].device_i_ds;
    assert_eq!(chosen, &[want_ids[1].clone(), want_ids[0].clone()]);
    let chosen: Vec<&str> = chosen.iter().map(String::as_str).collect();
    let resp = c
        .allocate(allocate_req(&chosen))
        .await
        .unwrap()
        .into_inner();
    let a = &resp.container_responses[0];
    let names: Vec<&str> = a.cdi_devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(
        names,
        ["davinci.ai/npu=davinci1", "davinci.ai/npu=davinci0"]
    );
    assert!(a.mounts.is_empty() && a.devices.is_empty(), "{a:?}");
    // The annotation too (a runtime reads either; both name the same devices).
    assert_eq!(
        a.annotations
            .get("cdi.k8s.io/davinci-device-plugin_davinci1"),
        Some(&"davinci.ai/npu=davinci1,davinci.ai/npu=davinci0".to_string()),
        "{a:?}"
    );
    assert_eq!(a.annotations.len(), 1, "{a:?}");
    let socks = devs.sockets();
    assert_eq!(
        a.envs["DAVINCI_VISIBLE_DEVICES"],
        format!("mock:{},mock:{}", socks[1].display(), socks[0].display())
    );
    drop(plugin);
    devs.stop();
}
