//! The kubelet's v1beta1 device-plugin API (messages, `registration_*` and
//! `device_plugin_*` server and client), generated from the vendored proto
//! (`proto/deviceplugin/v1beta1/api.proto`) by `build.rs`.
#![allow(missing_docs, clippy::all, clippy::pedantic)]

tonic::include_proto!("v1beta1");
