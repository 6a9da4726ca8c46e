//! nvidia-smi mode's text shapes against the samples in `tests/nvidia-smi-reference/`: every
//! `-L` line, `-q` line, `-q -x` element and table line has the recorded shape (the fakes are
//! those of `tests.rs`).

use std::collections::BTreeSet;

use super::tests::{nv, rigs, UUID_A};

macro_rules! sample {
    ($f:literal) => {
        include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/nvidia-smi-reference/",
            $f
        ))
    };
}

#[test]
fn list_gpus_is_the_recorded_line_shape() {
    let r = rigs();
    let (code, out, _) = nv(&r, &["-L"]);
    assert_eq!(code, 0);
    // The recorded line with the name and UUID replaced.
    let rec = sample!("L.txt")
        .replace("NVIDIA H100 80GB HBM3", "Ascend910B3")
        .replace("00000000-0000-0000-0000-000000000000", UUID_A);
    assert_eq!(out, format!("{rec}GPU 1: N/A (UUID: N/A)\n"));
    let (_, long, _) = nv(&r, &["--list-gpus"]);
    assert_eq!(long, out);
}

/// The key part of a `-q` line (up to and with ` : `), or the whole line.
fn q_key(line: &str) -> &str {
    line.find(" : ").map_or(line, |i| &line[..i + 3])
}

#[test]
fn query_lines_all_have_the_recorded_keys_and_columns() {
    let r = rigs();
    let (code, out, _) = nv(&r, &["-q"]);
    assert_eq!(code, 0);
    let recorded: BTreeSet<&str> = sample!("q.txt")
        .lines()
        .chain(sample!("q-h100.txt").lines())
        .map(q_key)
        .collect();
    let mut gpus = 0;
    for line in out.lines() {
        if line.starts_with("GPU ") {
            gpus += 1;
            continue;
        }
        if line.starts_with("Timestamp ") {
            let rec = sample!("q.txt")
                .lines()
                .find(|l| l.starts_with("Timestamp"))
                .unwrap();
            assert_eq!(line.len(), rec.len(), "{line}");
        }
        assert!(
            recorded.contains(q_key(line)),
            "not a recorded -q line: {line:?}"
        );
    }
    assert_eq!(gpus, 2);
    assert!(
        out.contains("\nGPU 00000000:0C:00.0\n    Product Name"),
        "{out}"
    );
    for want in [
        "        Used                                           : 4 MiB\n",
        "        GPU Current Temp                               : 41 C\n",
        "        Average Power Draw                             : 69.85 W\n",
        "        GPU                                            : 50 %\n",
        "    Compute Mode                                       : Exclusive_Process\n",
        "        Process ID                        : 4242\n",
        "    Processes                                          : None\n",
        &format!("    GPU UUID                                           : GPU-{UUID_A}\n"),
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
    // -d: the header, and only the sections named.
    let (_, mem, _) = nv(&r, &["-q", "-d", "MEMORY", "-i", "1"]);
    let lines: Vec<&str> = mem.lines().skip_while(|l| !l.starts_with("GPU ")).collect();
    assert_eq!(
        lines,
        vec![
            "GPU N/A",
            "    FB Memory Usage",
            "        Total                                          : 256 MiB",
            "        Reserved                                       : 0 MiB",
            "        Used                                           : 0 MiB",
            "        Free                                           : 256 MiB",
            "",
        ]
    );
}

/// Element paths (`a/b/c`) of XML written one element per line, as nvidia-smi writes it;
/// panics when the tags do not nest.
fn xml_paths(xml: &str) -> BTreeSet<String> {
    let mut stack: Vec<String> = Vec::new();
    let mut paths = BTreeSet::new();
    for line in xml
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with('<') && !l.starts_with("<?") && !l.starts_with("<!"))
    {
        if let Some(close) = line.strip_prefix("</") {
            let tag = close.trim_end_matches('>');
            assert_eq!(stack.pop().as_deref(), Some(tag), "{line}");
            continue;
        }
        let tag: String = line[1..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        stack.push(tag);
        paths.insert(stack.join("/"));
        if line.ends_with("/>") || line.contains("</") {
            stack.pop();
        }
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
    paths
}

#[test]
fn query_xml_has_only_recorded_elements() {
    let r = rigs();
    let (code, out, err) = nv(&r, &["-q", "-x"]);
    assert_eq!((code, err.as_str()), (0, ""));
    let recorded = xml_paths(sample!("q-x.xml"));
    let ours = xml_paths(&out);
    let extra: Vec<&String> = ours.difference(&recorded).collect();
    assert!(extra.is_empty(), "elements not in the sample: {extra:?}");
    let rec_head: Vec<&str> = sample!("q-x.xml").lines().take(3).collect();
    // The declaration, the DTD line telegraf picks its parser by, the root.
    assert_eq!(out.lines().take(3).collect::<Vec<_>>(), rec_head);
    for want in [
        "\t<gpu id=\"00000000:0C:00.0\">\n",
        "\t\t\t<gpu_temp>41 C</gpu_temp>\n",
        "\t\t\t<power_draw>69.85 W</power_draw>\n",
        "\t\t\t<pci_bus>0C</pci_bus>\n",
        "\t\t\t<pci_device_id>D80219E5</pci_device_id>\n",
        "\t\t\t<graphics_volt>750.000 mV</graphics_volt>\n",
        "\t\t\t\t<pid>4242</pid>\n",
        "\t\t\t<used>4 MiB</used>\n",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
}

#[test]
fn the_table_has_the_recorded_columns() {
    let r = rigs();
    let (code, out, _) = nv(&r, &[]);
    assert_eq!(code, 0);
    let rec: Vec<&str> = sample!("table.txt").lines().collect();
    let ours: Vec<&str> = out.lines().collect();
    // Where each line has its borders: the recorded table's, line kind for line kind.
    let borders = |l: &str| -> Vec<usize> {
        l.char_indices()
            .filter(|(_, c)| *c == '|' || *c == '+')
            .map(|(i, _)| i)
            .collect()
    };
    assert_eq!(ours[0].len(), rec[0].len());
    for l in &ours[1..] {
        if l.is_empty() {
            continue;
        }
        assert_eq!(l.chars().count(), 91, "{l:?}");
        assert!(
            rec.iter().any(|r| borders(r) == borders(l)),
            "no recorded line has the borders of {l:?}"
        );
    }
    // The fixed lines are the recorded ones.
    for fixed in &rec[3..8] {
        assert!(ours.contains(fixed), "{fixed}");
    }
    // A process line, given the recorded values, is the recorded line.
    let p = super::table::process_row(0, 28511, "ffmpeg", 230 << 20);
    assert_eq!(
        Some(&p.trim_end()),
        rec.iter().find(|l| l.contains(" 28511 "))
    );
    assert!(
        out.contains("|   0  Ascend910B3                    On  |   00000000:0C:00.0 Off |"),
        "{out}"
    );
    assert!(out.contains("| N/A   41C    P0             69W /  700W |       4MiB /    256MiB |     50%   E. Process |"), "{out}");
}
