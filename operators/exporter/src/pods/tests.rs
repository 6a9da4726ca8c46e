//! The pod-resources client against a stand-in kubelet on a Unix socket, and the matching
//! of device IDs to devices.

use super::api::pod_resources_lister_server::{PodResourcesLister, PodResourcesListerServer};
use super::api::{
    ContainerDevices, ContainerResources, ListPodResourcesRequest, ListPodResourcesResponse,
    PodResources as Pod,
};
use super::*;
use crate::collect::{Failure, Reading};
use davinci_uapi::{DeviceIdentity, Errno};

const UUID: &str = "0123abcd-0000-4000-8000-00000000beef";

fn uuid_bytes() -> [u8; 16] {
    let hex: String = UUID.chars().filter(|c| *c != '-').collect();
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

fn container(name: &str, resource: &str, ids: &[&str]) -> ContainerResources {
    ContainerResources {
        name: name.into(),
        devices: vec![ContainerDevices {
            resource_name: resource.into(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
        }],
    }
}

fn reply() -> ListPodResourcesResponse {
    ListPodResourcesResponse {
        pod_resources: vec![
            Pod {
                name: "train-0".into(),
                namespace: "ml".into(),
                containers: vec![container("trainer", DEFAULT_RESOURCE, &["davinci0"])],
            },
            Pod {
                name: "infer".into(),
                namespace: "web".into(),
                containers: vec![
                    container(
                        "server",
                        DEFAULT_RESOURCE,
                        &[
                            &format!("{}::1", UUID.to_uppercase()),
                            &format!("{UUID}::2"),
                        ],
                    ),
                    container("sidecar", DEFAULT_RESOURCE, &["davinci1::3"]),
                ],
            },
            Pod {
                name: "gpu-job".into(),
                namespace: "other".into(),
                containers: vec![container("c", "nvidia.com/gpu", &["davinci0"])],
            },
            Pod {
                name: "evil\u{1b}[2J".into(),
                namespace: "x".repeat(1000),
                containers: vec![container(
                    "c",
                    DEFAULT_RESOURCE,
                    &["davinci01", "nope", "davinci"],
                )],
            },
        ],
    }
}

struct Kubelet(ListPodResourcesResponse);

#[tonic::async_trait]
impl PodResourcesLister for Kubelet {
    async fn list(
        &self,
        _: tonic::Request<ListPodResourcesRequest>,
    ) -> Result<tonic::Response<ListPodResourcesResponse>, tonic::Status> {
        Ok(tonic::Response::new(self.0.clone()))
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("exporter-pods-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A stand-in kubelet serving `reply` on `socket` (on its own runtime, stopped on drop).
fn kubelet(socket: &Path, reply: ListPodResourcesResponse) -> tokio::runtime::Runtime {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let l = rt
        .block_on(async { tokio::net::UnixListener::bind(socket) })
        .unwrap();
    rt.spawn(
        tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(Kubelet(reply)))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(l)),
    );
    rt
}

fn sample(device: &str, uuid: Option<[u8; 16]>) -> Sample {
    let r = Reading {
        identity: uuid.map(|u| DeviceIdentity {
            uuid: u,
            ..Default::default()
        }),
        ..Default::default()
    };
    Sample {
        device: device.into(),
        path: format!("mock:/x/davinci{device}.sock"),
        pods: Vec::new(),
        identity: None,
        outcome: Ok(r),
    }
}

fn holder(pod: &str, ns: &str, c: &str) -> PodRef {
    PodRef {
        pod: pod.into(),
        namespace: ns.into(),
        container: c.into(),
    }
}

#[test]
fn a_stand_in_kubelet_attributes_devices_by_index_and_by_uuid() {
    let dir = temp_dir("ok");
    let socket = dir.join("kubelet.sock");
    let _k = kubelet(&socket, reply());
    let pr = PodResources::new(&socket, DEFAULT_RESOURCE, Duration::from_secs(5)).unwrap();
    let allocs = pr.list().unwrap();
    // The other resource's ID is not taken; the bad IDs are, but match nothing.
    assert_eq!(allocs.len(), 7, "{allocs:?}");
    assert!(allocs.iter().all(|a| a.holder.pod != "gpu-job"));
    let evil = allocs
        .iter()
        .find(|a| a.holder.pod.starts_with("evil"))
        .unwrap();
    assert_eq!(
        evil.holder.pod, "evil\\u{1b}[2J",
        "control characters are escaped"
    );
    assert_eq!(evil.holder.namespace.len(), MAX_NAME, "names are bounded");

    let mut samples = vec![
        sample("0", None),
        sample("1", Some(uuid_bytes())),
        Sample {
            outcome: Err(Failure {
                errno: Some(Errno::ENODEV),
                message: "gone".into(),
            }),
            ..sample("2", None)
        },
    ];
    attribute(&mut samples, &allocs);
    assert_eq!(samples[0].pods, [holder("train-0", "ml", "trainer")]);
    // By UUID (either case, two replicas: one holder), and by index with a replica.
    assert_eq!(
        samples[1].pods,
        [
            holder("infer", "web", "server"),
            holder("infer", "web", "sidecar")
        ]
    );
    assert!(samples[2].pods.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_socket_is_no_attribution_and_no_error_but_a_dead_one_is_an_error() {
    let dir = temp_dir("none");
    let pr = PodResources::new(
        &dir.join("kubelet.sock"),
        DEFAULT_RESOURCE,
        Duration::from_secs(2),
    )
    .unwrap();
    assert_eq!(pr.list(), Ok(Vec::new()));
    // A socket nobody listens on any more.
    let dead = dir.join("dead.sock");
    drop(std::os::unix::net::UnixListener::bind(&dead).unwrap());
    let pr = PodResources::new(&dead, DEFAULT_RESOURCE, Duration::from_secs(2)).unwrap();
    let e = pr.list().unwrap_err();
    assert!(e.contains("cannot connect"), "{e}");
    // A server that accepts and never answers: the timeout.
    let mute = dir.join("mute.sock");
    let _l = std::os::unix::net::UnixListener::bind(&mute).unwrap();
    let pr = PodResources::new(&mute, DEFAULT_RESOURCE, Duration::from_millis(300)).unwrap();
    let t0 = std::time::Instant::now();
    let e = pr.list().unwrap_err();
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    assert!(e.contains("no answer within 300 ms"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn device_ids() {
    assert_eq!(target("davinci0"), Some(Target::Index("0".into())));
    assert_eq!(target("davinci12::3"), Some(Target::Index("12".into())));
    assert_eq!(target("davinci01"), None);
    assert_eq!(target("davinci"), None);
    assert_eq!(target("davinci99999999999"), None);
    assert_eq!(
        target(&format!("{}::0", UUID.to_uppercase())),
        Some(Target::Uuid(UUID.into()))
    );
    assert_eq!(target("0123abcd-0000-4000-8000-00000000beeg"), None);
    assert_eq!(target(""), None);
    assert_eq!(target("::"), None);
}

#[test]
fn a_reply_with_too_many_ids_is_cut() {
    let ids: Vec<String> = (0..MAX_ALLOCATIONS + 10)
        .map(|i| format!("davinci{i}"))
        .collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let r = ListPodResourcesResponse {
        pod_resources: vec![Pod {
            name: "p".into(),
            namespace: "n".into(),
            containers: vec![container("c", DEFAULT_RESOURCE, &ids)],
        }],
    };
    assert_eq!(allocations(&r, DEFAULT_RESOURCE).len(), MAX_ALLOCATIONS);
}
