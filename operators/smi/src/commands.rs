//! The device commands (`info`, `info -t device-share`, `info -t usage`, `set -t
//! device-share`): what each asks of the devices, and its text and JSON output.
#![forbid(unsafe_code)]

use davinci_uapi::{ClientUsage, Errno, ShareMode};

use crate::access::{DeviceAccess, Target};
use crate::error::{combine, SmiError};
use crate::extras::{device_extras, fill_busy, Extras};
use crate::output::*;

pub(crate) fn id_text(id: Option<u32>) -> String {
    id.map_or("-".into(), |i| i.to_string())
}

pub(crate) fn doc(body: Body, outcomes: &[Option<&SmiError>]) -> Doc {
    Doc {
        schema: SCHEMA,
        command: "",
        exit_code: combine(outcomes),
        body,
    }
}

/// What a command produced: the JSON document, the text for stdout, and (text and CSV
/// output) the error lines for stderr, one per failed device.
pub(crate) struct Report {
    pub(crate) doc: Doc,
    pub(crate) text: String,
    pub(crate) errors: String,
}

/// The stderr line of a device that failed.
pub(crate) fn error_line(id: Option<u32>, e: &SmiError) -> String {
    format!("davinci-smi: device {}: {}\n", id_text(id), e.message)
}

pub(crate) fn report(
    body: Body,
    errors: &[(Option<u32>, Option<SmiError>)],
    text: String,
) -> Report {
    let outcomes: Vec<Option<&SmiError>> = errors.iter().map(|(_, e)| e.as_ref()).collect();
    let lines = errors
        .iter()
        .filter_map(|(id, e)| e.as_ref().map(|e| error_line(*id, e)))
        .collect();
    Report {
        doc: doc(body, &outcomes),
        text,
        errors: lines,
    }
}

/// A client as JSON (the usage table, and the clients a refused `set` names).
/// `-` for an empty text cell.
pub(crate) fn dash_if_empty(s: &str) -> String {
    if s.is_empty() {
        "-".to_string()
    } else {
        printable(s)
    }
}

pub(crate) fn client_json(u: &ClientUsage) -> ClientJson {
    ClientJson {
        client_id: u.client_id,
        pid: u.pid,
        uid: u.uid,
        container_id: printable_field(&u.container),
        tenant: tenant_of(u),
        contexts: u.contexts,
        streams: u.streams,
        events: u.events,
        allocations: u.allocations,
        memory_bytes: u.memory_bytes,
        tasks_submitted: u.tasks_submitted,
        tasks_completed: u.tasks_completed,
        tasks_queued: u.tasks_queued,
        process_name: printable_field(&u.comm),
    }
}

/// `info`; `busy`: measure utilization too (a `--query` field shows it; it costs a wait of
/// [`crate::extras::BUSY_SAMPLE`], once for all devices).
pub(crate) fn board(targets: &[Target], busy: bool) -> Report {
    let mut devices = Vec::new();
    let mut errors = Vec::new();
    let mut clients_rows = Vec::new();
    let mut asked: Vec<_> = targets
        .iter()
        .map(|t| {
            t.dev.as_ref().map_err(Clone::clone).and_then(|d| {
                let info = d.info()?;
                // Usage is best effort here: a device that answers GET_INFO is healthy.
                let clients = d.clients().unwrap_or_default();
                let extras = device_extras(d.as_ref(), &info);
                Ok((info, clients, extras))
            })
        })
        .collect();
    if busy {
        fill_busy(
            targets
                .iter()
                .zip(asked.iter_mut())
                .filter_map(|(t, r)| Some((t.dev.as_ref().ok()?.as_ref(), &mut r.as_mut().ok()?.2)))
                .collect(),
        );
    }
    for (t, r) in targets.iter().zip(asked) {
        match r {
            Ok((i, clients, extras)) => {
                let mode = ShareMode::from_u32(i.share_mode);
                devices.push(DeviceJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    health: "ok",
                    error: None,
                    abi: Some(format!("{}.{}", i.abi_major, i.abi_minor)),
                    memory: Some(MemoryJson {
                        total_bytes: i.memory_size,
                        used_bytes: i.memory_used,
                        client_limit_bytes: i.client_memory_limit,
                    }),
                    clients: Some(i.clients),
                    max_clients: Some(i.max_clients),
                    share_mode: mode.map(ShareMode::name),
                    device_share: mode.map(|m| m == ShareMode::Shared),
                    extras,
                });
                for u in clients {
                    clients_rows.push(vec![
                        id_text(t.entry.id),
                        u.pid.to_string(),
                        short_container(&printable_field(&u.container)),
                        mib(u.memory_bytes),
                        format!("{}/{}", u.tasks_completed, u.tasks_submitted),
                    ]);
                }
                errors.push((t.entry.id, None));
            }
            Err(e) => {
                devices.push(DeviceJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    health: "unreachable",
                    error: Some(e.json()),
                    abi: None,
                    memory: None,
                    clients: None,
                    max_clients: None,
                    share_mode: None,
                    device_share: None,
                    extras: Extras::default(),
                });
                errors.push((t.entry.id, Some(e)));
            }
        }
    }
    let rows: Vec<Vec<String>> = devices
        .iter()
        .map(|d| {
            vec![
                id_text(d.id),
                if d.health == "ok" {
                    "OK"
                } else {
                    "Unreachable"
                }
                .to_string(),
                d.memory.map_or("-".into(), |m| {
                    format!("{} / {}", mib(m.used_bytes), mib(m.total_bytes))
                }),
                d.clients.map_or("-".into(), |c| c.to_string()),
                d.share_mode.unwrap_or("-").to_string(),
                d.path.clone(),
            ]
        })
        .collect();
    let mut text = table(
        &[
            "Device",
            "Health",
            "Memory MiB used / total",
            "Clients",
            "Share",
            "Path",
        ],
        &rows,
    );
    if clients_rows.is_empty() {
        if errors.iter().any(|(_, e)| e.is_none()) {
            text += "No clients attached.\n";
        }
    } else {
        text += &table(
            &[
                "Device",
                "PID",
                "Container",
                "Memory MiB",
                "Tasks done/submitted",
            ],
            &clients_rows,
        );
    }
    report(Body::Info { devices }, &errors, text)
}

pub(crate) fn share(targets: &[Target]) -> Report {
    let mut devices = Vec::new();
    let mut errors = Vec::new();
    let mut text = String::new();
    for t in targets {
        match t.dev.as_ref().map_err(Clone::clone).and_then(|d| d.share()) {
            Ok((mode, clients)) => {
                text += &kv(&[
                    ("Device ID", id_text(t.entry.id)),
                    (
                        "Device-share Status",
                        if mode == ShareMode::Shared {
                            "True"
                        } else {
                            "False"
                        }
                        .into(),
                    ),
                    ("Share Mode", mode.name().into()),
                    ("Clients", clients.to_string()),
                ]);
                text.push('\n');
                devices.push(ShareJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    health: "ok",
                    error: None,
                    device_share: Some(mode == ShareMode::Shared),
                    share_mode: Some(mode.name()),
                    clients: Some(clients),
                });
                errors.push((t.entry.id, None));
            }
            Err(e) => {
                text += &kv(&[
                    ("Device ID", id_text(t.entry.id)),
                    ("Status", "Unreachable".into()),
                ]);
                text.push('\n');
                devices.push(ShareJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    health: "unreachable",
                    error: Some(e.json()),
                    device_share: None,
                    share_mode: None,
                    clients: None,
                });
                errors.push((t.entry.id, Some(e)));
            }
        }
    }
    report(Body::Share { devices }, &errors, text)
}

/// Whose quotas bind client `u`: `user:UID`, `container:ID`, or empty (a driver before 1.5).
pub(crate) fn tenant_of(u: &ClientUsage) -> String {
    match u.tenant_kind {
        davinci_uapi::TENANT_USER => format!("user:{}", u.uid),
        davinci_uapi::TENANT_CONTAINER => format!("container:{}", printable_field(&u.container)),
        _ => String::new(),
    }
}

/// The tenant as the usage table shows it: `user 1000`, `ctr 3f1c2b8e9a7d`, `-`.
pub(crate) fn short_tenant(t: &str) -> String {
    match t.split_once(':') {
        Some(("user", uid)) => format!("user {uid}"),
        Some(("container", id)) => format!("ctr {}", id.chars().take(12).collect::<String>()),
        _ => "-".into(),
    }
}

pub(crate) fn short_container(c: &str) -> String {
    if c.is_empty() {
        "-".into()
    } else {
        printable(&c.chars().take(12).collect::<String>())
    }
}

pub(crate) fn usage(targets: &[Target]) -> Report {
    let mut devices = Vec::new();
    let mut errors = Vec::new();
    let mut text = String::new();
    for t in targets {
        let r = t
            .dev
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|d| Ok((d.share()?.0, d.clients()?)));
        match r {
            Ok((mode, list)) => {
                let clients: Vec<ClientJson> = list.iter().map(client_json).collect();
                text += &format!(
                    "Device {} ({}): {} mode, {} client(s)\n",
                    id_text(t.entry.id),
                    t.entry.path,
                    mode.name(),
                    clients.len()
                );
                if clients.is_empty() {
                    text += "No clients attached.\n";
                } else {
                    let rows: Vec<Vec<String>> = clients
                        .iter()
                        .map(|c| {
                            vec![
                                c.pid.to_string(),
                                dash_if_empty(&c.process_name),
                                c.uid.to_string(),
                                short_container(&c.container_id),
                                short_tenant(&c.tenant),
                                c.contexts.to_string(),
                                c.streams.to_string(),
                                c.events.to_string(),
                                c.allocations.to_string(),
                                mib(c.memory_bytes),
                                c.tasks_submitted.to_string(),
                                c.tasks_queued.to_string(),
                                c.tasks_completed.to_string(),
                            ]
                        })
                        .collect();
                    text += &table(
                        &[
                            "PID",
                            "Process",
                            "UID",
                            "Container",
                            "Tenant",
                            "Contexts",
                            "Streams",
                            "Events",
                            "Allocs",
                            "Memory MiB",
                            "Submitted",
                            "Queued",
                            "Completed",
                        ],
                        &rows,
                    );
                }
                devices.push(UsageJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    health: "ok",
                    error: None,
                    share_mode: Some(mode.name()),
                    clients,
                });
                errors.push((t.entry.id, None));
            }
            Err(e) => {
                text += &format!(
                    "Device {} ({}): unreachable\n",
                    id_text(t.entry.id),
                    t.entry.path,
                );
                devices.push(UsageJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    health: "unreachable",
                    error: Some(e.json()),
                    share_mode: None,
                    clients: Vec::new(),
                });
                errors.push((t.entry.id, Some(e)));
            }
        }
    }
    report(Body::Usage { devices }, &errors, text)
}

/// A refusal of `set` with `EBUSY` names the clients that would be stranded (as a refused
/// exclusive open names its holder): their list, and the error with their names appended.
fn name_holders(d: &dyn DeviceAccess, e: SmiError) -> (SmiError, Option<Vec<ClientJson>>) {
    if e.errno != Some(Errno::EBUSY) {
        return (e, None);
    }
    match d.clients() {
        Ok(list) if !list.is_empty() => {
            let names: Vec<String> = list.iter().map(ToString::to_string).collect();
            let e = SmiError {
                message: format!("{}; clients attached: {}", e.message, names.join(", ")),
                ..e
            };
            (e, Some(list.iter().map(client_json).collect()))
        }
        _ => (e, None),
    }
}

pub(crate) fn set(targets: &[Target], mode: ShareMode) -> Report {
    let mut results = Vec::new();
    let mut errors = Vec::new();
    let mut text = String::new();
    let word = |m: ShareMode| {
        if m == ShareMode::Shared {
            "enabled"
        } else {
            "disabled"
        }
    };
    for t in targets {
        let (previous, r, now, held_by) = match &t.dev {
            Err(e) => (None, Err(e.clone()), None, None),
            Ok(d) => {
                let previous = d.share().ok().map(|(m, _)| m);
                match d.set_share(mode) {
                    Ok(()) => (previous, Ok(()), Some(mode), None),
                    Err(e) => {
                        let (e, held_by) = name_holders(d.as_ref(), e);
                        // Refused: the mode is whatever the device says it is now.
                        let now = d.share().ok().map(|(m, _)| m);
                        (previous, Err(e), now, held_by)
                    }
                }
            }
        };
        match r {
            Ok(()) => {
                let changed = previous != Some(mode);
                let msg = if changed {
                    format!(
                        "device-share {} (was {})",
                        word(mode),
                        previous.map_or("unknown", word)
                    )
                } else {
                    format!("device-share already {}; nothing changed", word(mode))
                };
                text += &kv(&[
                    ("Device ID", id_text(t.entry.id)),
                    ("Status", "OK".into()),
                    ("Message", msg),
                ]);
                results.push(SetResultJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    status: "ok",
                    changed: Some(changed),
                    previous_share_mode: previous.map(ShareMode::name),
                    share_mode: now.map(ShareMode::name),
                    error: None,
                    held_by,
                });
                errors.push((t.entry.id, None));
            }
            Err(e) => {
                text += &kv(&[
                    ("Device ID", id_text(t.entry.id)),
                    ("Status", "Fail".into()),
                ]);
                results.push(SetResultJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    status: "error",
                    changed: None,
                    previous_share_mode: previous.map(ShareMode::name),
                    share_mode: now.map(ShareMode::name),
                    error: Some(e.json()),
                    held_by,
                });
                errors.push((t.entry.id, Some(e)));
            }
        }
        text.push('\n');
    }
    let requested = SetRequestJson {
        device_share: mode == ShareMode::Shared,
        share_mode: mode.name(),
    };
    report(Body::Set { requested, results }, &errors, text)
}

#[cfg(test)]
mod tests;
