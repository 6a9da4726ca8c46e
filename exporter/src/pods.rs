//! Pod attribution: which pod, namespace and container the kubelet gave each device to.
#![forbid(unsafe_code)]

/// A container that holds (an ID of) a device.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PodRef {
    /// The pod's name.
    pub pod: String,
    /// The pod's namespace.
    pub namespace: String,
    /// The container's name.
    pub container: String,
}
