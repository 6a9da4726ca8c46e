//! `-t tenant-share` (TENANT_SHARE, ABI 1.5; docs/security.md "Tenants"): how many of a
//! device's tenant slots one tenant counts for, read (`info -t tenant-share`) and set (`set
//! -t tenant-share --tenant T -d N`), with its text and JSON output; and the tenant an
//! operator names, a container's id prefix resolved against the devices' clients as docker
//! resolves ids.
#![forbid(unsafe_code)]

use davinci_uapi::{ClientUsage, Errno, TenantShareArgs, TENANT_CONTAINER, TENANT_SLOTTED};

use crate::access::{DeviceAccess, Target};
use crate::commands::{id_text, report, tenant_of, Report};
use crate::error::SmiError;
use crate::output::*;

/// The tenant `given` (`user:UID` or `container:ID`) names, with its whole container id: `ID`
/// as is with `exact` or when a container of that id has a client open on one of `targets`;
/// else the one container with a client open whose id starts with `ID`. None (`ENOENT`) or
/// several (`EINVAL`) is an error that lists what there is.
pub(crate) fn resolve(targets: &[Target], given: &str, exact: bool) -> Result<String, SmiError> {
    let Some(prefix) = given.strip_prefix("container:") else {
        return Ok(given.to_string());
    };
    if exact {
        return Ok(given.to_string());
    }
    let mut ids: Vec<String> = Vec::new();
    for d in targets.iter().filter_map(|t| t.dev.as_ref().ok()) {
        for u in d.clients().unwrap_or_default() {
            if let Some(id) = container_of(&u) {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
    }
    if ids.iter().any(|i| i == prefix) {
        return Ok(given.to_string());
    }
    let hits: Vec<&String> = ids.iter().filter(|i| i.starts_with(prefix)).collect();
    let on = match targets {
        [t] => format!("device {}", id_text(t.entry.id)),
        _ => "the devices".to_string(),
    };
    match hits.as_slice() {
        [one] => Ok(format!("container:{one}")),
        [] => {
            let there = if ids.is_empty() {
                "no container has one".to_string()
            } else {
                let all: Vec<String> = ids.iter().map(|i| printable(i)).collect();
                format!("containers with clients: {}", all.join(", "))
            };
            Err(SmiError::new(
                Errno::ENOENT,
                format!(
                    "no container whose id starts with '{}' has a client open on {on} ({there}); \
                     name a container with none open by its whole id with --exact",
                    printable(prefix)
                ),
            ))
        }
        many => Err(SmiError::new(
            Errno::EINVAL,
            format!(
                "container id prefix '{}' is ambiguous on {on}: it matches {}; give more of the id",
                printable(prefix),
                many.iter()
                    .map(|i| printable(i))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// The container id of a client whose tenant is its container (not one counted by user).
fn container_of(u: &ClientUsage) -> Option<String> {
    if u.tenant_kind != TENANT_CONTAINER {
        return None;
    }
    let len = u
        .container
        .iter()
        .position(|&b| b == 0)
        .unwrap_or(u.container.len());
    String::from_utf8(u.container[..len].to_vec())
        .ok()
        .filter(|s| !s.is_empty())
}

/// TENANT_SHARE's failure as the operator reads it: an older driver's `ENOTTY` says so.
fn tenant_share(
    d: &dyn DeviceAccess,
    tenant: &str,
    set: Option<u32>,
) -> Result<TenantShareArgs, SmiError> {
    d.tenant_share(tenant, set).map_err(|mut e| {
        if e.errno == Some(Errno::ENOTTY) {
            e.message += "; the driver predates ABI 1.5 (no TENANT_SHARE): upgrade davinci-mockd \
                          or the kernel module";
        }
        e
    })
}

fn tenant_json(tenant: &str, a: &TenantShareArgs) -> TenantJson {
    TenantJson {
        tenant: printable(tenant),
        shares: a.shares,
        holds_slots: a.tenant_flags & TENANT_SLOTTED != 0,
        has_opens: a.tenant_flags != 0,
    }
}

/// Whether a tenant holds its slots, in words.
fn holds_text(t: &TenantJson) -> &'static str {
    if !t.has_opens {
        "No (no open)"
    } else if t.holds_slots {
        "Yes"
    } else if t.shares == 0 {
        "No (best effort)"
    } else {
        // Waiting for free slots, or only admins' and control opens (which hold none).
        "No"
    }
}

/// A tenant as a table shows it: a container's id to 12 characters (a prefix `--tenant`
/// takes).
fn short(t: &str) -> String {
    match t.split_once(':') {
        Some(("container", id)) if id.chars().count() > 12 => {
            format!("container:{}", id.chars().take(12).collect::<String>())
        }
        _ => t.to_string(),
    }
}

fn slots_text(shares: u32) -> String {
    match shares {
        0 => "0 slots: best effort".into(),
        1 => "1 slot".into(),
        n => format!("{n} slots"),
    }
}

/// `info -t tenant-share`: `tenant` (whole), else every tenant with a client open on each
/// device (LIST_CLIENTS), each read with TENANT_SHARE.
pub(crate) fn show(targets: &[Target], tenant: Option<&str>) -> Report {
    let mut devices = Vec::new();
    let mut errors = Vec::new();
    let mut text = String::new();
    for t in targets {
        let r = t.dev.as_ref().map_err(Clone::clone).and_then(|d| {
            let names: Vec<String> = match tenant {
                Some(n) => vec![n.to_string()],
                None => {
                    let mut v: Vec<String> = Vec::new();
                    for u in d.clients()? {
                        let n = tenant_of(&u);
                        if !n.is_empty() && !v.contains(&n) {
                            v.push(n);
                        }
                    }
                    v
                }
            };
            let mut read = Vec::new();
            for n in &names {
                let a = tenant_share(d.as_ref(), n, None)?;
                read.push((tenant_json(n, &a), a.slots, a.free_slots));
            }
            Ok(read)
        });
        let here = format!("Device {} ({})", id_text(t.entry.id), t.entry.path);
        match r {
            Ok(read) => {
                let slots = read.first().map(|r| (r.1, r.2));
                let tenants: Vec<TenantJson> = read.into_iter().map(|r| r.0).collect();
                if let Some((s, free)) = slots {
                    text += &format!("{here}: {s} tenant slot(s), {free} free\n");
                    let rows: Vec<Vec<String>> = tenants
                        .iter()
                        .map(|x| {
                            vec![
                                short(&x.tenant),
                                x.shares.to_string(),
                                holds_text(x).to_string(),
                            ]
                        })
                        .collect();
                    text += &table(&["Tenant", "Shares", "Holds its slots"], &rows);
                } else {
                    text +=
                        &format!("{here}: no tenant has a client open (name one with --tenant)\n");
                }
                devices.push(TenantShareJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    health: "ok",
                    error: None,
                    slots: slots.map(|s| s.0),
                    free_slots: slots.map(|s| s.1),
                    tenants,
                });
                errors.push((t.entry.id, None));
            }
            Err(e) => {
                let unreachable = t.dev.is_err() || e.errno == Some(Errno::ENODEV);
                text += &format!(
                    "{here}: {}\n",
                    if unreachable {
                        "unreachable"
                    } else {
                        "tenant shares not read"
                    }
                );
                devices.push(TenantShareJson {
                    id: t.entry.id,
                    path: t.entry.path.clone(),
                    health: if unreachable { "unreachable" } else { "ok" },
                    error: Some(e.json()),
                    slots: None,
                    free_slots: None,
                    tenants: Vec::new(),
                });
                errors.push((t.entry.id, Some(e)));
            }
        }
    }
    report(Body::TenantShare { devices }, &errors, text)
}

/// `set -t tenant-share`: `tenant` (whole; `given` as typed) made to count for `shares`
/// slots on every target, with what it counted for before and what holds after.
pub(crate) fn set(targets: &[Target], tenant: &str, given: &str, shares: u32) -> Report {
    let mut results = Vec::new();
    let mut errors = Vec::new();
    let mut text = String::new();
    for t in targets {
        let (previous, r, now) = match &t.dev {
            Err(e) => (None, Err(e.clone()), None),
            Ok(d) => {
                let previous = tenant_share(d.as_ref(), tenant, None).ok();
                match tenant_share(d.as_ref(), tenant, Some(shares)) {
                    Ok(a) => (previous, Ok(()), Some(a)),
                    // Refused: the setting is whatever the device says it is now.
                    Err(e) => (
                        previous,
                        Err(e),
                        tenant_share(d.as_ref(), tenant, None).ok(),
                    ),
                }
            }
        };
        let prev = previous.map(|a| a.shares);
        let now_json = now.as_ref().map(|a| tenant_json(tenant, a));
        let mut result = TenantSetResultJson {
            id: t.entry.id,
            path: t.entry.path.clone(),
            status: "ok",
            changed: None,
            previous_shares: prev,
            shares: now.map(|a| a.shares),
            slots: now.map(|a| a.slots),
            free_slots: now.map(|a| a.free_slots),
            holds_slots: now_json.as_ref().map(|j| j.holds_slots),
            has_opens: now_json.as_ref().map(|j| j.has_opens),
            error: None,
        };
        match r {
            Ok(()) => {
                let changed = prev != Some(shares);
                let who = printable(tenant);
                let msg = if changed {
                    format!(
                        "{who} counts for {} (was {})",
                        slots_text(shares),
                        prev.map_or("unknown".into(), |p| p.to_string())
                    )
                } else {
                    format!(
                        "{who} already counts for {}; nothing changed",
                        slots_text(shares)
                    )
                };
                let mut rows = vec![
                    ("Device ID", id_text(t.entry.id)),
                    ("Status", "OK".into()),
                    ("Message", msg),
                ];
                if let (Some(a), Some(j)) = (now, &now_json) {
                    rows.push((
                        "Shares / Slots",
                        format!("{} / {} ({} free)", a.shares, a.slots, a.free_slots),
                    ));
                    rows.push(("Holds Its Slots", holds_text(j).into()));
                }
                text += &kv(&rows);
                result.changed = Some(changed);
                errors.push((t.entry.id, None));
            }
            Err(e) => {
                text += &kv(&[
                    ("Device ID", id_text(t.entry.id)),
                    ("Status", "Fail".into()),
                ]);
                result.status = "error";
                result.error = Some(e.json());
                errors.push((t.entry.id, Some(e)));
            }
        }
        results.push(result);
        text.push('\n');
    }
    let requested = TenantRequestJson {
        tenant: printable(tenant),
        given: printable(given),
        shares,
    };
    report(Body::TenantSet { requested, results }, &errors, text)
}

#[cfg(test)]
mod tests;
