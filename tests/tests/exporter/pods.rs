//! Pods: devices are labelled with the pods the kubelet gave them to (its pod-resources API,
//! here a stand-in).
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use davinci_shim::Control;
use davinci_tests::mockd::Mockd;

use super::{Exporter, T};

/// A stand-in kubelet: the pod-resources API's `List`, answering `reply`.
struct PodResourcesStandIn(davinci_exporter::pods::api::ListPodResourcesResponse);

#[tonic::async_trait]
impl davinci_exporter::pods::api::pod_resources_lister_server::PodResourcesLister
    for PodResourcesStandIn
{
    async fn list(
        &self,
        _: tonic::Request<davinci_exporter::pods::api::ListPodResourcesRequest>,
    ) -> Result<tonic::Response<davinci_exporter::pods::api::ListPodResourcesResponse>, tonic::Status>
    {
        Ok(tonic::Response::new(self.0.clone()))
    }
}

#[test]
fn devices_are_labelled_with_the_pods_the_kubelet_gave_them_to() {
    use davinci_exporter::pods::api::pod_resources_lister_server::PodResourcesListerServer;
    use davinci_exporter::pods::api::{
        ContainerDevices, ContainerResources, ListPodResourcesResponse, PodResources,
    };
    let d = Mockd::start(&["--devices", "2"]).unwrap();
    let dir = d.dir().display().to_string();
    let uuid1 = Control::open(&d.path(1))
        .unwrap()
        .identity()
        .unwrap()
        .uuid_string()
        .to_string();
    let pod = |name: &str, ns: &str, c: &str, ids: Vec<String>| PodResources {
        name: name.into(),
        namespace: ns.into(),
        containers: vec![ContainerResources {
            name: c.into(),
            devices: vec![ContainerDevices {
                resource_name: "davinci.ai/npu".into(),
                device_ids: ids,
            }],
        }],
    };
    // Device 0 by index (the plugin's IDs today), device 1 by UUID (a shared replica).
    let reply = ListPodResourcesResponse {
        pod_resources: vec![
            pod("train-0", "ml", "trainer", vec!["davinci0".into()]),
            pod("infer", "web", "server", vec![format!("{uuid1}::1")]),
        ],
    };
    let socket = d.dir().join("kubelet.sock");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let incoming = rt
        .block_on(async { davinci_device_plugin::transport::listen(&socket) })
        .unwrap();
    rt.spawn(
        tonic::transport::Server::builder()
            .add_service(PodResourcesListerServer::new(PodResourcesStandIn(reply)))
            .serve_with_incoming(incoming),
    );
    let sock = socket.display().to_string();
    let ex = Exporter::start(&[
        "--socket-dir",
        &dir,
        "--pod-resources-socket",
        &sock,
        "--cache",
        "0",
    ]);
    let e = ex.scrape();
    let d0 = [
        ("device", "0"),
        ("pod", "train-0"),
        ("namespace", "ml"),
        ("container", "trainer"),
    ];
    assert_eq!(e.value("davinci_device_up", &d0), 1.0);
    assert_eq!(e.value("davinci_device_memory_used_bytes", &d0), 0.0);
    assert_eq!(e.value("davinci_device_pod_info", &d0), 1.0);
    let d1 = [
        ("device", "1"),
        ("pod", "infer"),
        ("namespace", "web"),
        ("container", "server"),
    ];
    assert_eq!(e.value("davinci_device_up", &d1), 1.0);
    assert_eq!(e.value("davinci_device_pod_info", &d1), 1.0);
    assert!(!ex.log().contains("pod-resources"), "{}", ex.log());

    // No socket (not a node): no pod labels, nothing logged.
    let missing = d.dir().join("no-kubelet.sock").display().to_string();
    let ex2 = Exporter::start(&["--socket-dir", &dir, "--pod-resources-socket", &missing]);
    let e = ex2.scrape();
    assert_eq!(e.value("davinci_device_up", &[("device", "0")]), 1.0);
    assert!(
        e.series.iter().all(|s| !s.labels.contains_key("pod")),
        "{}",
        e.text
    );
    assert!(!ex2.log().contains("pod"), "{}", ex2.log());

    // The kubelet goes away: the scrapes go on without pod labels; said once.
    drop(rt);
    let e = ex.scrape();
    assert_eq!(e.value("davinci_device_up", &[("device", "0")]), 1.0);
    assert!(
        e.series.iter().all(|s| !s.labels.contains_key("pod")),
        "{}",
        e.text
    );
    ex.scrape();
    let said = || {
        ex.log()
            .matches("no pod attribution: pod-resources")
            .count()
    };
    let until = Instant::now() + T;
    while said() == 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let said = said();
    assert_eq!(said, 1, "{}", ex.log());
}
