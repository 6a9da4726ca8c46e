//! docs/abi.md must cover the whole ABI as the metadata defines it, so it cannot silently fall
//! behind: every command has its own section with its request number, argument struct, caller
//! and errors; every ring-header field is described in the ring section; every struct, flag
//! set and constant group has a generated block; every opcode has an operand section; every
//! errno is explained.

use davinci_uapi::args::Caller;
use davinci_uapi::Errno;
use xtask::{workspace_root, ABI_DOC_PATH};

/// The text of the section that starts with the heading line `heading` (exactly), up to the
/// next heading of the same or a higher level.
fn section<'a>(doc: &'a str, heading: &str) -> Option<&'a str> {
    let level = heading.chars().take_while(|&c| c == '#').count();
    let start = doc.lines().position(|l| l.trim_end() == heading)?;
    let lines: Vec<&str> = doc.lines().collect();
    let end = lines[start + 1..]
        .iter()
        .position(|l| {
            let h = l.chars().take_while(|&c| c == '#').count();
            h > 0 && h <= level && l[h..].starts_with(' ')
        })
        .map_or(lines.len(), |p| start + 1 + p);
    let begin = lines[..start].iter().map(|l| l.len() + 1).sum::<usize>();
    let stop = lines[..end]
        .iter()
        .map(|l| l.len() + 1)
        .sum::<usize>()
        .min(doc.len());
    Some(&doc[begin..stop])
}

fn caller_words(c: Caller) -> &'static str {
    match c {
        Caller::Any => "any open",
        Caller::Client => "client open",
        Caller::Admin => "admin",
    }
}

/// Everything the document fails to cover; empty when complete.
fn coverage_problems(doc: &str) -> Vec<String> {
    let mut problems = Vec::new();
    for c in davinci_uapi::COMMANDS {
        let heading = format!("### {}", c.name);
        let Some(s) = section(doc, &heading) else {
            problems.push(format!("no `{heading}` section"));
            continue;
        };
        let must = [
            format!("`DAVINCI_IOCTL_{}`", c.name),
            format!("`0x{:08X}`", c.request),
            format!("struct {}", c.arg),
            "**Errors:**".to_string(),
        ];
        for m in must {
            if !s.contains(&m) {
                problems.push(format!("section {heading} does not mention {m}"));
            }
        }
        let caller = format!("**Caller:** {}", caller_words(c.caller));
        if !s.contains(&caller) {
            problems.push(format!("section {heading} must say `{caller}`"));
        }
    }

    let ring = section(doc, "## 5. The ring protocol").unwrap_or("");
    if ring.is_empty() {
        problems.push("no `## 5. The ring protocol` section".into());
    }
    let header = davinci_uapi::STRUCTS
        .iter()
        .find(|s| s.rust_name == "RingHeader");
    for f in header.map(|h| h.fields).unwrap_or(&[]) {
        let row = format!("| {} | `{}` |", f.offset, f.name);
        if !ring.contains(&row) {
            problems.push(format!(
                "ring layout table has no row `{row}` for RingHeader.{}",
                f.name
            ));
        }
    }
    for needle in [
        "Release",
        "Acquire",
        "NEED_WAKEUP",
        "fence(SeqCst)",
        "doorbell",
        "Flow control",
        "error state",
    ] {
        if !ring.contains(needle) {
            problems.push(format!("the ring section never mentions {needle}"));
        }
    }

    // The doorbell rule is quoted from the bits' own doc text (the header's comments), so the
    // three cannot drift apart again (issue 22: the header kept ABI 1.0's lost-wake-up rule).
    let doorbell = section(doc, "### 5.3 Doorbell and the NEED_WAKEUP handshake").unwrap_or("");
    let quoted = doorbell
        .lines()
        .find_map(|l| l.trim().strip_prefix("<!-- generated: bits "))
        .unwrap_or("");
    for bit in [
        "DAVINCI_RING_F_NEED_WAKEUP",
        "DAVINCI_FEAT_DOORBELL_MMIO",
        "DAVINCI_FEAT_DOORBELL_FUTEX",
    ] {
        if !quoted.split_whitespace().any(|w| w == bit) {
            problems.push(format!(
                "section 5.3 does not quote {bit} from uapi/src (a generated bits block)"
            ));
        }
    }

    for s in davinci_uapi::STRUCTS {
        if !doc.contains(&format!("<!-- generated: struct {} -->", s.c_name)) {
            problems.push(format!("no generated block for struct {}", s.c_name));
        }
    }
    for f in davinci_uapi::FLAGS {
        if !doc.contains(&format!("<!-- generated: flags {} -->", f.c_prefix)) {
            problems.push(format!("no generated block for flags {}", f.c_prefix));
        }
    }
    for g in davinci_uapi::CONST_GROUPS.iter().flat_map(|g| g.iter()) {
        if !doc.contains(&format!("<!-- generated: consts {} -->", g.c_prefix)) {
            problems.push(format!("no generated block for constants {}", g.c_prefix));
        }
    }
    for spec in ["commands", "scalars"] {
        if !doc.contains(&format!("<!-- generated: {spec} -->")) {
            problems.push(format!("no generated {spec} block"));
        }
    }

    let ops = davinci_uapi::CONST_GROUPS
        .iter()
        .flat_map(|g| g.iter())
        .filter(|g| g.c_prefix == "DAVINCI_OP_");
    for g in ops {
        for (name, _, _) in g.items {
            let heading = format!("#### DAVINCI_OP_{name}");
            if section(doc, &heading).is_none() {
                problems.push(format!("no `{heading}` operand section"));
            }
        }
    }

    let errors = section(doc, "## 2. Errors").unwrap_or("");
    for e in Errno::ALL {
        let row = format!("| `{}` | {} |", e.name(), e.code());
        if !errors.contains(&row) {
            problems.push(format!("errno table has no row `{row}`"));
        }
    }

    for (heading, needle) in [
        ("## 9. Trust model", "task_desc_phys"),
        ("## 9. Trust model", "IOMMU"),
        ("## 10. Compatibility checklist", "ioctl.rst"),
        ("### 1.3 Versioning and feature probing", "GET_INFO"),
        ("## 4. Memory mappings (mmap cookies)", "MAP_SHARED"),
    ] {
        match section(doc, heading) {
            None => problems.push(format!("no `{heading}` section")),
            Some(s) if !s.contains(needle) => {
                problems.push(format!("section {heading} never mentions {needle}"))
            }
            Some(_) => {}
        }
    }
    problems
}

fn read_doc() -> String {
    let path = workspace_root().join(ABI_DOC_PATH);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn abi_doc_covers_every_command_ring_field_struct_opcode_and_errno() {
    let problems = coverage_problems(&read_doc());
    assert!(
        problems.is_empty(),
        "{ABI_DOC_PATH} has fallen behind the ABI in uapi/src:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn coverage_check_notices_a_missing_command_section_and_ring_field() {
    let doc = read_doc();
    let notify = section(&doc, "### NOTIFY").expect("the real doc has it");
    let without =
        doc.replacen(notify, "", 1)
            .replacen("| 140 | `dropped` |", "| 140 | dropped |", 1);
    let problems = coverage_problems(&without);
    assert!(
        problems.iter().any(|p| p.contains("### NOTIFY")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("RingHeader.dropped")),
        "{problems:?}"
    );
    let wrong_number = doc.replacen("= `0x4008640F`,", "= `0x4008640E`,", 1);
    assert_ne!(wrong_number, doc);
    assert!(coverage_problems(&wrong_number)
        .iter()
        .any(|p| p.contains("0x4008640F")));
}
