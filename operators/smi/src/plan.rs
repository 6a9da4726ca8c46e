//! A command line, checked and run: what to do ([`Action`]), on which devices, printed how
//! (text, `--json`, `--query` CSV), how often (`--loop`, `--count`); and one round of it:
//! discover, open, ask, print.
#![forbid(unsafe_code)]

use std::time::Duration;

use davinci_ops::discover::{self, Discovery, Entry};
use davinci_uapi::{Errno, ShareMode};

use crate::access::{Opener, Target};
use crate::cdi_generate::{generate, Generate, Generated};
use crate::cli::{
    CdiCmd, Cli, Cmd, Global, IdSel, InfoType, LoopArgs, QueryArgs, SetType, TenantArgs,
};
use crate::commands::{board, id_text, set, share, usage};
use crate::error::{exit, SmiError};
use crate::output::{printable, table, Body, Doc, ListedDevice, SCHEMA};
use crate::query::{
    csv, parse_format, select, timestamp_now, Columns, CsvFormat, BOARD_DEFAULT, BOARD_FIELDS,
    USAGE_DEFAULT, USAGE_FIELDS,
};
use crate::tenants;

/// What a command does.
pub(crate) enum Action {
    /// `list`: the devices found (none is opened).
    List,
    /// `info`: the device table.
    Board,
    /// `info -t device-share`.
    Share,
    /// `info -t usage`.
    Usage,
    /// `info -t tenant-share`: `--tenant` (and `--exact`), else every tenant with a client.
    TenantShare(TenantArgs),
    /// `set -t device-share`.
    Set(ShareMode),
    /// `set -t tenant-share --tenant T -d N`.
    SetTenant(TenantArgs, u32),
    /// `cdi generate`.
    Cdi(Generate),
}

/// `--tenant` given to another `-t`.
const TENANT_ONLY: &str = "--tenant and --exact apply to -t tenant-share only";

/// What one round wrote, and its exit status.
pub(crate) struct Round {
    pub(crate) out: String,
    pub(crate) err: String,
    pub(crate) code: i32,
}

/// The command line, checked: what to do, how to print it, how often.
pub(crate) struct Plan {
    command: &'static str,
    id: Option<IdSel>,
    action: Action,
    json: bool,
    csv: Option<(Columns, CsvFormat)>,
    pub(crate) every: Option<Duration>,
    pub(crate) count: Option<u64>,
    /// The sockets this round's discovery left out as untrusted (said on stderr, and in
    /// every JSON document as `ignored`).
    ignored: std::cell::RefCell<Vec<discover::Ignored>>,
}

impl Plan {
    pub(crate) fn of(cli: &Cli) -> Result<Plan, String> {
        // Options given after the subcommand win over the same ones before it.
        let pick_q = |sub: &QueryArgs| QueryArgs {
            query: if sub.query.is_empty() {
                cli.query.query.clone()
            } else {
                sub.query.clone()
            },
            format: if sub.format.is_empty() {
                cli.query.format.clone()
            } else {
                sub.format.clone()
            },
        };
        let pick_l = |sub: &LoopArgs| LoopArgs {
            every: sub.every.or(cli.repeat.every),
            count: sub.count.or(cli.repeat.count),
        };
        let none = (QueryArgs::default(), LoopArgs::default());
        let (command, id, action, (query, repeat)) = match &cli.cmd {
            _ if cli.list => (
                "list",
                None,
                Action::List,
                (pick_q(&none.0), pick_l(&none.1)),
            ),
            None => (
                "info",
                None,
                Action::Board,
                (pick_q(&none.0), pick_l(&none.1)),
            ),
            Some(Cmd::List { repeat }) => (
                "list",
                None,
                Action::List,
                (pick_q(&none.0), pick_l(repeat)),
            ),
            Some(Cmd::Info {
                list: true,
                query,
                repeat,
                ..
            }) => ("list", None, Action::List, (pick_q(query), pick_l(repeat))),
            Some(Cmd::Info {
                ty,
                tenant,
                id,
                query,
                repeat,
                ..
            }) => {
                let q = (pick_q(query), pick_l(repeat));
                let ty = ty.unwrap_or(InfoType::Board);
                if tenant.tenant.is_some() && ty != InfoType::TenantShare {
                    return Err(TENANT_ONLY.into());
                }
                match ty {
                    InfoType::Board => ("info", *id, Action::Board, q),
                    InfoType::DeviceShare => ("info-device-share", *id, Action::Share, q),
                    InfoType::Usage => ("info-usage", *id, Action::Usage, q),
                    InfoType::TenantShare => (
                        "info-tenant-share",
                        *id,
                        Action::TenantShare(tenant.clone()),
                        q,
                    ),
                }
            }
            Some(Cmd::Set {
                ty,
                tenant,
                id,
                data,
                ..
            }) => {
                // `-d` was checked against `-t` by `cli::validated`.
                let n: u32 = data
                    .parse()
                    .map_err(|_| format!("-d '{data}' is not a number"))?;
                let action = match ty {
                    SetType::DeviceShare if tenant.tenant.is_some() => {
                        return Err(TENANT_ONLY.into())
                    }
                    SetType::DeviceShare => Action::Set(if n == 1 {
                        ShareMode::Shared
                    } else {
                        ShareMode::Exclusive
                    }),
                    SetType::TenantShare if tenant.tenant.is_none() => {
                        return Err("set -t tenant-share needs --tenant user:UID|container:ID (the tenant to set)".into())
                    }
                    SetType::TenantShare => Action::SetTenant(tenant.clone(), n),
                };
                let command = match ty {
                    SetType::DeviceShare => "set-device-share",
                    SetType::TenantShare => "set-tenant-share",
                };
                (
                    command,
                    Some(*id),
                    action,
                    (pick_q(&none.0), pick_l(&none.1)),
                )
            }
            Some(Cmd::Top(_)) => return Err("`top` is not run through a plan".into()),
            Some(Cmd::Events(_)) => return Err("`events` is not run through a plan".into()),
            Some(Cmd::Trace(_)) => return Err("`trace` is not run through a plan".into()),
            Some(Cmd::Cdi {
                cmd: CdiCmd::Generate(g),
            }) => (
                "cdi-generate",
                None,
                Action::Cdi(Generate {
                    output: g.output.clone(),
                    format: g.format,
                    kind: g.kind.clone(),
                    version: g.cdi_version,
                }),
                (pick_q(&none.0), pick_l(&none.1)),
            ),
        };
        let json = cli.global.json;
        let csv = if query.query.is_empty() && query.format.is_empty() {
            None
        } else {
            let fmt = if query.format.is_empty() {
                CsvFormat {
                    header: true,
                    units: true,
                }
            } else {
                parse_format(&query.format)?
            };
            let cols = match action {
                Action::Board => Columns::Board(select(
                    BOARD_FIELDS,
                    &query.query,
                    BOARD_DEFAULT,
                    "`info`",
                )?),
                Action::Usage => Columns::Usage(select(
                    USAGE_FIELDS,
                    &query.query,
                    USAGE_DEFAULT,
                    "`info -t usage`",
                )?),
                _ => {
                    return Err(format!(
                        "--query and --format apply to `info` (the device table) and `info -t usage`, not to `{command}`"
                    ))
                }
            };
            if json {
                return Err(
                    "--query/--format print CSV and --json prints JSON: give one or the other"
                        .into(),
                );
            }
            Some((cols, fmt))
        };
        if repeat.count.is_some() && repeat.every.is_none() {
            return Err("--count N needs --loop SECONDS".into());
        }
        if repeat.every.is_some() && matches!(action, Action::Set(_) | Action::SetTenant(..)) {
            return Err("--loop and --count do not apply to `set`".into());
        }
        if repeat.every.is_some() && matches!(action, Action::Cdi(_)) {
            return Err("--loop and --count do not apply to `cdi generate`".into());
        }
        Ok(Plan {
            command,
            id,
            action,
            json,
            csv,
            every: repeat.every,
            count: repeat.count,
            ignored: Default::default(),
        })
    }

    /// A JSON document: pretty, or one per line in a loop (JSON Lines).
    fn render(&self, d: &Doc) -> String {
        let ignored = self.ignored.borrow();
        if !ignored.is_empty() {
            // Additions only (schema v1): `ignored`, each socket discovery left out and why.
            if let Ok(serde_json::Value::Object(mut m)) = serde_json::to_value(d) {
                let list = ignored
                    .iter()
                    .map(|i| serde_json::json!({"path": printable(&i.path), "why": printable(&i.why)}))
                    .collect();
                m.insert("ignored".into(), serde_json::Value::Array(list));
                let v = serde_json::Value::Object(m);
                let text = if self.every.is_some() {
                    serde_json::to_string(&v)
                } else {
                    serde_json::to_string_pretty(&v)
                };
                if let Ok(t) = text {
                    return t + "\n";
                }
            }
        }
        if self.every.is_some() {
            d.render_line()
        } else {
            d.render()
        }
    }

    /// `list`: the selected devices (none is opened).
    fn list(&self, entries: &[Entry], stamp: String) -> Round {
        let devices: Vec<ListedDevice> = entries
            .iter()
            .map(|e| ListedDevice {
                id: e.id,
                path: e.path.clone(),
            })
            .collect();
        let out = if self.json {
            self.render(&Doc {
                schema: SCHEMA,
                command: self.command,
                exit_code: exit::OK,
                body: Body::List { devices },
            })
        } else {
            let rows: Vec<Vec<String>> = devices
                .iter()
                .map(|d| vec![id_text(d.id), d.path.clone()])
                .collect();
            stamp + &table(&["Device", "Path"], &rows)
        };
        Round {
            out,
            err: String::new(),
            code: exit::OK,
        }
    }

    /// `cdi generate` done: the spec (or where it went) on stdout and warnings on stderr; or
    /// with `--json` one document with all of it.
    fn cdi_round(&self, done: Generated) -> Round {
        if self.json {
            let d = Doc {
                schema: SCHEMA,
                command: self.command,
                exit_code: exit::OK,
                body: Body::Cdi {
                    output: done.output,
                    format: done.format.name(),
                    kind: done.kind,
                    cdi_version: done.spec.cdi_version.clone(),
                    devices: done.devices,
                    warnings: done.warnings,
                    spec: done.spec,
                },
            };
            Round {
                out: self.render(&d),
                err: String::new(),
                code: exit::OK,
            }
        } else {
            Round {
                out: done.text,
                err: done
                    .warnings
                    .iter()
                    .map(|w| format!("davinci-smi: warning: {w}\n"))
                    .collect(),
                code: exit::OK,
            }
        }
    }

    /// One run of the command: discover, open, ask, print; sockets discovery left out as
    /// untrusted are said first on stderr (`warning: ignoring PATH: WHY`) and in the JSON.
    pub(crate) fn round(
        &self,
        g: &Global,
        disc: &Discovery,
        opener: &dyn Opener,
        first: bool,
    ) -> Round {
        let found = discover::discover(&g.device, g.socket_dir.as_deref(), disc);
        let warnings: String = discover::ignored_warnings(&found)
            .iter()
            .map(|w| format!("davinci-smi: {}\n", printable(w)))
            .collect();
        *self.ignored.borrow_mut() = found.ignored.clone();
        let mut r = self.round_found(found, g, disc, opener, first);
        r.err = warnings + &r.err;
        r
    }

    fn round_found(
        &self,
        found: discover::Found,
        g: &Global,
        disc: &Discovery,
        opener: &dyn Opener,
        first: bool,
    ) -> Round {
        let timestamp = timestamp_now();
        let fail = |e: SmiError| {
            let code = e.exit_code();
            if self.json {
                let d = Doc {
                    schema: SCHEMA,
                    command: self.command,
                    exit_code: code,
                    body: Body::Failed { error: e.json() },
                };
                Round {
                    out: self.render(&d),
                    err: String::new(),
                    code,
                }
            } else {
                Round {
                    out: String::new(),
                    err: format!("davinci-smi: {}\n", e.message),
                    code,
                }
            }
        };
        let entries = match find(found) {
            Ok(e) => e,
            Err(e) => return fail(e),
        };
        // A header line in text mode for every round of a loop, so rounds can be told apart.
        let stamp = if self.every.is_some() && !self.json && self.csv.is_none() {
            format!("{timestamp}\n")
        } else {
            String::new()
        };
        if matches!(self.action, Action::List) {
            return self.list(&entries, stamp);
        }
        let targets = match open_targets(entries, self.id, g, disc, opener) {
            Ok(t) => t,
            Err(e) => return fail(e),
        };
        let report = match self.action {
            Action::Board => board(
                &targets,
                matches!(&self.csv, Some((Columns::Board(f), _)) if f.iter().any(|f| f.name == "utilization.gpu")),
            ),
            Action::Share => share(&targets),
            Action::Usage => usage(&targets),
            Action::Set(mode) => set(&targets, mode),
            Action::TenantShare(ref t) => {
                let tenant = match &t.tenant {
                    Some(given) => match tenants::resolve(&targets, given, t.exact) {
                        Ok(whole) => Some(whole),
                        Err(e) => return fail(e),
                    },
                    None => None,
                };
                tenants::show(&targets, tenant.as_deref())
            }
            Action::SetTenant(ref t, shares) => {
                let given = t.tenant.as_deref().unwrap_or_default();
                match tenants::resolve(&targets, given, t.exact) {
                    Ok(whole) => tenants::set(&targets, &whole, given, shares),
                    Err(e) => return fail(e),
                }
            }
            Action::Cdi(ref g) => {
                return match generate(&targets, g) {
                    Err(e) => fail(e),
                    Ok(done) => self.cdi_round(done),
                }
            }
            Action::List => {
                let entries: Vec<Entry> = targets.into_iter().map(|t| t.entry).collect();
                return self.list(&entries, stamp);
            }
        };
        let doc = Doc {
            command: self.command,
            ..report.doc
        };
        let code = doc.exit_code;
        if self.json {
            Round {
                out: self.render(&doc),
                err: String::new(),
                code,
            }
        } else if let Some((cols, fmt)) = &self.csv {
            Round {
                out: csv(cols, *fmt, &doc.body, &timestamp, first && fmt.header),
                err: report.errors,
                code,
            }
        } else {
            Round {
                out: stamp + &report.text,
                err: report.errors,
                code,
            }
        }
    }
}

/// The devices discovery `found` (each once), or why there are none.
pub(crate) fn find(found: discover::Found) -> Result<Vec<Entry>, SmiError> {
    if found.entries.is_empty() {
        return Err(SmiError::new(
            Errno::ENODEV,
            format!(
                "no davinci devices found (looked for {})",
                discover::describe_searched(&found)
            ),
        ));
    }
    Ok(dedupe(found.entries))
}

/// `entries` opened (a path that does not name its id gets it from GET_INFO), and kept to
/// davinci`N` when `id` is `-i N`; no device with that id is an error.
pub(crate) fn open_targets(
    entries: Vec<Entry>,
    id: Option<IdSel>,
    g: &Global,
    disc: &Discovery,
    opener: &dyn Opener,
) -> Result<Vec<Target>, SmiError> {
    let mut targets: Vec<Target> = entries
        .into_iter()
        .map(|e| {
            let dev = opener.open(&e.path);
            Target { entry: e, dev }
        })
        .collect();
    // Paths that do not name their id get it from GET_INFO.
    for t in &mut targets {
        if t.entry.id.is_none() {
            if let Ok(d) = &t.dev {
                t.entry.id = d.info().ok().map(|i| i.device_id);
            }
        }
    }
    if let Some(IdSel::One(n)) = id {
        targets.retain(|t| t.entry.id == Some(n));
        if targets.is_empty() {
            return Err(SmiError::new(
                Errno::ENODEV,
                format!(
                    "no device with id {n} (see `davinci-smi list`; looked in {})",
                    discover::searched(&g.device, g.socket_dir.as_deref(), disc)
                ),
            ));
        }
    }
    Ok(targets)
}

/// The selected devices with each device once: a path named twice, or two paths to the same
/// socket or node (`/run/davinci/./davinci0.sock`, a symlink), keep the first.
fn dedupe(entries: Vec<Entry>) -> Vec<Entry> {
    let mut seen = std::collections::HashSet::new();
    entries
        .into_iter()
        .filter(|e| seen.insert(same_device_key(&e.path)))
        .collect()
}

/// What makes two device paths the same: the kind (`mock:` or not) and the file, resolved
/// when it exists (else the path with `.` and repeated `/` removed).
fn same_device_key(path: &str) -> (bool, std::path::PathBuf) {
    let (mock, file) = match path.strip_prefix("mock:") {
        Some(f) => (true, f),
        None => (false, path),
    };
    let p = std::path::Path::new(file);
    let resolved = std::fs::canonicalize(p).unwrap_or_else(|_| p.components().collect());
    (mock, resolved)
}

#[cfg(test)]
mod tests {
    //! Which devices a command line reaches (`list`, unknown ids, a device named twice) and
    //! the checks of `--loop`.

    use crate::exit;
    use crate::tests::*;

    #[test]
    fn list_in_every_spelling() {
        let w = two();
        for args in [&["-l"][..], &["list"], &["info", "-l"]] {
            let mut a: Vec<&str> = BOTH.to_vec();
            a.extend_from_slice(args);
            let (code, out, _) = smi(&w, &a);
            assert_eq!(code, 0);
            assert!(out.contains(A) && out.contains(B), "{out}");
        }
        let (_, out, _) = smi(&w, &["--device", A, "--device", B, "list", "--json"]);
        let v = doc(&out);
        assert_eq!(v["command"], "list");
        assert_eq!(v["devices"][1]["id"], 1);
        assert_eq!(v["devices"][1]["path"], B);
    }

    #[test]
    fn nothing_found_and_unknown_ids_exit_3() {
        let w = two();
        let (code, _, err) = smi(&w, &["info"]);
        assert_eq!(code, exit::NOT_FOUND);
        assert!(err.contains("no davinci devices found"), "{err}");
        let (code, out, _) = smi(&w, &["info", "--json"]);
        assert_eq!(code, exit::NOT_FOUND);
        let v = doc(&out);
        assert_eq!(v["error"]["errno"], "ENODEV");
        assert_eq!(v["exit_code"], 3);
        let mut a = BOTH.to_vec();
        a.extend(["info", "-t", "usage", "-i", "5"]);
        let (code, _, err) = smi(&w, &a);
        assert_eq!(code, exit::NOT_FOUND);
        assert!(err.contains("no device with id 5"), "{err}");
    }

    #[test]
    fn a_device_named_twice_is_used_once() {
        let w = two();
        let twice = ["--device", A, "--device", B, "--device", A];
        let (_, out, _) = smi(&w, &args(&twice, &["list", "--json"]));
        let v = doc(&out);
        assert_eq!(v["devices"].as_array().unwrap().len(), 2, "{v}");
        for a in [&["info", "--json"][..], &["info", "-t", "usage", "--json"]] {
            let v = doc(&smi(&w, &args(&twice, a)).1);
            let paths: Vec<&str> = v["devices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["path"].as_str().unwrap())
                .collect();
            assert_eq!(paths, vec![A, B], "{a:?}");
        }
        let (_, out, _) = smi(&w, &args(&twice, &["info"]));
        assert_eq!(out.matches(A).count(), 1, "{out}");
        // The same socket by another path (`.`, `//`, a symlink): the first spelling is kept.
        let dir = std::env::temp_dir().join(format!("smi-dedupe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("davinci0.sock"), b"").unwrap();
        let _ = std::fs::remove_file(dir.join("link.sock"));
        std::os::unix::fs::symlink(dir.join("davinci0.sock"), dir.join("link.sock")).unwrap();
        let first = format!("mock:{}/davinci0.sock", dir.display());
        let w = world(vec![(first.as_str(), fake(0, vec![], false, true))]);
        let dot = format!("mock:{}/./davinci0.sock", dir.display());
        let slashes = format!("mock:{}//davinci0.sock", dir.display());
        let link = format!("mock:{}/link.sock", dir.display());
        let kernel = format!("{}/davinci0.sock", dir.display());
        let a = [
            "--device", &first, "--device", &dot, "--device", &slashes, "--device", &link,
            "--device", &kernel, "list", "--json",
        ];
        let v = doc(&smi(&w, &a).1);
        let paths: Vec<&str> = v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["path"].as_str().unwrap())
            .collect();
        // A kernel path is another way to open it, so it stays.
        assert_eq!(paths, vec![first.as_str(), kernel.as_str()]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn loop_usage_errors() {
        let w = two();
        for (a, what) in [
            (&["info", "--count", "2"][..], "--count N needs --loop"),
            (&["--loop", "0", "info"], "greater than 0"),
            (&["--loop", "-1", "info"], "greater than 0"),
            (&["--loop", "x", "info"], "not a number of seconds"),
            (&["--loop", "1e9", "info"], "at most 86400"),
            (&["--loop", "1", "--count", "0", "info"], "0 is not in 1.."),
            (
                &[
                    "--loop",
                    "1",
                    "set",
                    "-t",
                    "device-share",
                    "-i",
                    "0",
                    "-d",
                    "1",
                ],
                "do not apply to `set`",
            ),
        ] {
            let (code, out, err) = smi(&w, &args(&BOTH, a));
            assert_eq!((code, out.as_str()), (exit::USAGE, ""), "{a:?}: {err}");
            assert!(err.contains(what), "{a:?}: {err}");
        }
    }
}
