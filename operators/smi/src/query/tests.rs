//! `--query`/`--format`: the format grammar, the field lists, timestamps, and the device and
//! usage tables as CSV against fake devices.

use super::*;
use crate::exit;
use crate::tests::*;

#[test]
fn timestamps() {
    assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339(951_782_400, 5), "2000-02-29T00:00:00.005Z");
    assert_eq!(rfc3339(1_795_515_761, 418), "2026-11-24T10:22:41.418Z");
}

#[test]
fn formats() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        parse_format(&s(&["csv", "noheader", "nounits"])),
        Ok(CsvFormat {
            header: false,
            units: false
        })
    );
    assert!(parse_format(&s(&["noheader"]))
        .unwrap_err()
        .contains("needs csv"));
    assert!(parse_format(&s(&["csv", "xml"]))
        .unwrap_err()
        .contains("'xml'"));
    assert_eq!(cell("a,b"), "\"a,b\"");
    assert_eq!(cell("say \"x\""), "\"say \"\"x\"\"\"");
}

#[test]
fn field_names_are_unique_and_defaults_exist() {
    for (names, defaults) in [
        (
            BOARD_FIELDS.iter().map(|f| f.name).collect::<Vec<_>>(),
            BOARD_DEFAULT,
        ),
        (USAGE_FIELDS.iter().map(|f| f.name).collect(), USAGE_DEFAULT),
    ] {
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "{names:?}");
        assert!(defaults.iter().all(|d| names.contains(d)), "{defaults:?}");
    }
}

#[test]
fn query_prints_the_device_table_as_csv() {
    let w = two();
    let (code, out, err) = smi(
        &w,
        &args(
            &BOTH,
            &[
                "info",
                "--query",
                "index,share_mode,memory.used,clients",
                "--format",
                "csv",
            ],
        ),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "index, share_mode, memory.used [MiB], clients\n0, exclusive, 4 MiB, 1\n1, shared, 0 MiB, 0\n"
    );
    // noheader, nounits, --format=a,b and the fields in the order asked.
    let (_, out, _) = smi(
        &w,
        &args(
            &BOTH,
            &[
                "info",
                "-i",
                "1",
                "--query=memory.total,index",
                "--format=csv,noheader,nounits",
            ],
        ),
    );
    assert_eq!(out, "256, 1\n");
    // Before the subcommand, or with no subcommand (nvidia-smi's habit).
    let (_, out, _) = smi(
        &w,
        &args(
            &BOTH,
            &["--query", "index,device_share", "--format=csv,noheader"],
        ),
    );
    assert_eq!(out, "0, false\n1, true\n");
    // --format alone: the default columns; every field has a value.
    let (_, out, _) = smi(&w, &args(&BOTH, &["info", "--format", "csv"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "index, health, memory.used [MiB], memory.total [MiB], clients, share_mode, path"
    );
    assert_eq!(
        lines[1],
        format!("0, ok, 4 MiB, 256 MiB, 1, exclusive, {A}")
    );
    // Every field the ABI reports has a value; those it does not yet are [N/A].
    // (`pci.bus_id`: the mock device is on no bus.)
    let unreported = [
        "name",
        "uuid",
        "pci.bus_id",
        "utilization.gpu",
        "utilization.memory",
    ];
    let every: Vec<&str> = BOARD_FIELDS
        .iter()
        .map(|f| f.name)
        .filter(|n| !unreported.contains(n))
        .collect();
    let (_, out, _) = smi(
        &w,
        &args(
            &BOTH,
            &["info", "--query", &every.join(","), "--format=csv,noheader"],
        ),
    );
    assert!(!out.contains("[N/A]"), "{out}");
    assert!(out.starts_with("20"), "timestamp first: {out}");
    let (_, out, _) = smi(
        &w,
        &args(
            &BOTH,
            &[
                "info",
                "--query",
                &unreported.join(","),
                "--format=csv,noheader",
            ],
        ),
    );
    assert_eq!(
        out,
        "[N/A], [N/A], [N/A], [N/A], [N/A]\n[N/A], [N/A], [N/A], [N/A], [N/A]\n"
    );
    // A PCI device's GET_IDENTITY gives `pci.bus_id` (and `name`) a value.
    {
        let mut s = w.opener.devs[A].state.borrow_mut();
        s.info.features |= davinci_uapi::Features::IDENTITY;
        s.identity = Some(davinci_uapi::DeviceIdentity {
            bus_id: davinci_uapi::DeviceIdentity::text_field("0000:00:04.0"),
            pci_vendor: 0x1af4,
            pci_device: 0x1110,
            ..Default::default()
        });
    }
    let (_, out, _) = smi(
        &w,
        &args(
            &BOTH,
            &[
                "info",
                "--query",
                "index,pci.bus_id",
                "--format=csv,noheader",
            ],
        ),
    );
    assert_eq!(out, "0, 0000:00:04.0\n1, [N/A]\n");
}

#[test]
fn query_of_an_unreachable_device_is_na_and_its_error_goes_to_stderr() {
    let w = two();
    let (code, out, err) = smi(
        &w,
        &[
            "--device",
            A,
            "--device",
            "mock:/s/davinci7.sock",
            "info",
            "--query",
            "index,health,clients,path",
            "--format",
            "csv,noheader",
        ],
    );
    assert_eq!(code, exit::PARTIAL);
    assert_eq!(
        out,
        format!("0, ok, 1, {A}\n7, unreachable, [N/A], mock:/s/davinci7.sock\n")
    );
    assert!(
        err.starts_with("davinci-smi: device 7: open failed"),
        "{err}"
    );
}

#[test]
fn query_prints_the_usage_table_as_csv() {
    let w = world(vec![
        (
            A,
            fake(
                0,
                vec![usage_of(100, "abc,def", 4 << 20), usage_of(101, "", 0)],
                true,
                true,
            ),
        ),
        (B, fake(1, vec![usage_of(200, "", 1 << 20)], true, true)),
    ]);
    let (code, out, err) = smi(
        &w,
        &args(
            &BOTH,
            &[
                "info",
                "-t",
                "usage",
                "--query",
                "index,pid,container_id,memory.used,tasks.submitted,tasks.completed,client_id",
                "--format",
                "csv",
            ],
        ),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "index, pid, container_id, memory.used [MiB], tasks.submitted, tasks.completed, client_id\n\
         0, 100, \"abc,def\", 4 MiB, 10, 9, 1100\n\
         0, 101, , 0 MiB, 10, 9, 1101\n\
         1, 200, , 1 MiB, 10, 9, 1200\n"
    );
    let (_, out, _) = smi(
        &w,
        &args(
            &BOTH,
            &[
                "info",
                "-t",
                "usage",
                "-i",
                "1",
                "--format=csv,noheader,nounits",
            ],
        ),
    );
    assert_eq!(out, "1, 200, proc200, 0, , 1, 2, 0, 3, 1, 10, 1, 9\n");
}

#[test]
fn query_errors_are_usage_errors_naming_the_valid_fields() {
    let w = two();
    let (code, out, err) = smi(&w, &args(&BOTH, &["info", "--query", "index,bogus"]));
    assert_eq!((code, out.as_str()), (exit::USAGE, ""));
    assert!(err.contains("unknown field 'bogus'"), "{err}");
    assert!(
        err.contains("valid fields: timestamp, index, path, health"),
        "{err}"
    );
    let (_, _, err) = smi(
        &w,
        &args(&BOTH, &["info", "-t", "usage", "--query", "health"]),
    );
    assert!(
        err.contains("unknown field 'health'")
            && err.contains("pid, uid, process_name, container_id"),
        "{err}"
    );
    for (a, what) in [
        (
            &["info", "--format", "xml"][..],
            "unknown --format option 'xml'",
        ),
        (&["info", "--format", "noheader"], "needs csv"),
        (
            &["info", "-t", "device-share", "--query", "index"],
            "not to `info-device-share`",
        ),
        (&["list", "--format", "csv"], "unexpected argument"),
        (&["--format", "csv", "list"], "not to `list`"),
        (
            &[
                "--query",
                "index",
                "set",
                "-t",
                "device-share",
                "-i",
                "0",
                "-d",
                "1",
            ],
            "not to `set-device-share`",
        ),
        (
            &["info", "--query", "index", "--json"],
            "give one or the other",
        ),
    ] {
        let (code, out, err) = smi(&w, &args(&BOTH, a));
        assert_eq!(code, exit::USAGE, "{a:?}: {out}{err}");
        let text = if out.is_empty() { err } else { out };
        assert!(text.contains(what), "{a:?}: {text}");
    }
}

#[test]
fn nvidia_smi_query_gpu_lines_work_as_written() {
    let mut w = two();
    // 32 GiB and 1.5 MiB used: memory in whole MiB, as nvidia-smi prints it.
    if let Some(d) = w.opener.devs.get_mut(A) {
        let mut s = d.state.borrow_mut();
        s.info.memory_size = 32 << 30;
        s.clients[0].memory_bytes = 3 << 19;
        s.info.memory_used = 3 << 19;
    }
    let (code, out, err) = smi(
        &w,
        &args(
            &BOTH,
            &[
                "--query-gpu=index,name,uuid,utilization.gpu,utilization.memory,memory.total,memory.used,memory.free",
                "--format=csv",
            ],
        ),
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "index, name, uuid, utilization.gpu [%], utilization.memory [%], memory.total [MiB], memory.used [MiB], memory.free [MiB]"
    );
    assert_eq!(
        lines[1],
        "0, [N/A], [N/A], [N/A], [N/A], 32768 MiB, 1 MiB, 32766 MiB"
    );
    assert_eq!(
        lines[2],
        "1, [N/A], [N/A], [N/A], [N/A], 256 MiB, 0 MiB, 256 MiB"
    );
    // nounits: just the integer; after the subcommand too.
    let (_, out, _) = smi(
        &w,
        &args(
            &BOTH,
            &[
                "info",
                "-i",
                "0",
                "--query-gpu",
                "memory.used,memory.total,utilization.gpu",
                "--format=csv,noheader,nounits",
            ],
        ),
    );
    assert_eq!(out, "1, 32768, [N/A]\n");
}
