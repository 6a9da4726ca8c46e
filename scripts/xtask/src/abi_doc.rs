//! The generated blocks of `docs/abi.md`: struct listings, the command table, constant
//! tables.

use std::fmt::Write as _;

use crate::cfmt::*;
use crate::ctype::*;
use crate::{err, Abi, GenError, ABI_DOC_PATH, DOC_BLOCK_END, DOC_BLOCK_START};

pub(crate) fn direction_tag(doc: &[&str]) -> &'static str {
    let all = doc.join(" ");
    let to = all.contains("(to driver") || all.contains("(to device");
    let from = all.contains("from driver") || all.contains("(from device");
    match (to, from) {
        (true, false) => "in",
        (false, true) => "out",
        (true, true) => "in/out",
        _ => "",
    }
}

pub(crate) fn doc_struct_block(r: &Resolved<'_>) -> String {
    let decls: Vec<String> = r
        .info
        .fields
        .iter()
        .zip(&r.fields)
        .map(|(f, ct)| format!("{};", ct.decl(f.name)))
        .collect();
    let w = decls.iter().map(String::len).max().unwrap_or(0);
    let mut o = String::from("```c\n");
    let _ = writeln!(o, "struct {} {{ /* {} bytes */", r.info.c_name, r.info.size);
    for (f, d) in r.info.fields.iter().zip(&decls) {
        let tag = direction_tag(f.doc);
        let tag = if tag.is_empty() {
            String::new()
        } else {
            format!(" {tag}")
        };
        let _ = writeln!(o, "    {d:w$} /* {:#04x}{tag} */", f.offset);
    }
    o.push_str("};\n```\n");
    o
}

pub(crate) fn md_cell(s: &str) -> String {
    s.trim().replace('|', "\\|")
}

pub(crate) fn doc_commands_block(abi: &Abi<'_>) -> String {
    let mut o = String::from(
        "| Command | Request | Nr | Macro | Argument | Caller |\n|---|---|---|---|---|---|\n",
    );
    for c in abi.commands {
        let _ = writeln!(
            o,
            "| `DAVINCI_IOCTL_{}` | `0x{:08X}` | `{:#04x}` | `{}` | `struct {}` ({} B) | {} |",
            c.name,
            c.request,
            c.nr,
            ioc_macro(c.dir),
            c.arg,
            c.size,
            caller_text(c.caller)
        );
    }
    o
}

pub(crate) fn doc_table(rows: &[(String, String, String)]) -> String {
    let mut o = String::from("| Name | Value | Meaning |\n|---|---|---|\n");
    for (n, v, d) in rows {
        let _ = writeln!(o, "| `{n}` | {v} | {} |", md_cell(d));
    }
    o
}

/// A bullet per flag bit named in `names` (full C names, e.g. `DAVINCI_FEAT_DOORBELL_FUTEX`),
/// each with the bit's doc text: word for word what the header's comment on the bit and the
/// tables of section 11 say, so a rule the spec quotes this way (the doorbell's, section 5.3)
/// cannot drift from them.
pub(crate) fn doc_bits_block(abi: &Abi<'_>, names: &str) -> Result<String, GenError> {
    let mut o = String::new();
    for name in names.split_whitespace() {
        let found = abi.flags.iter().find_map(|f| {
            let bit = name.strip_prefix(f.c_prefix)?;
            f.bits.iter().find(|(n, _, _)| *n == bit)
        });
        let Some((_, value, doc)) = found else {
            return err(format!(
                "{ABI_DOC_PATH}: generated block names unknown flag bit `{name}`"
            ));
        };
        let text = format!("* `{name}` (`{value:#x}`): {}", doc.trim());
        for (i, line) in wrap(&text, 93).iter().enumerate() {
            if i > 0 {
                o.push_str("  ");
            }
            o.push_str(line);
            o.push('\n');
        }
    }
    if o.is_empty() {
        return err(format!(
            "{ABI_DOC_PATH}: a generated bits block names no flag bit"
        ));
    }
    Ok(o)
}

pub(crate) fn render_doc_block(
    abi: &Abi<'_>,
    structs: &[Resolved<'_>],
    spec: &str,
) -> Result<String, GenError> {
    let spec = spec.trim();
    if spec == "commands" {
        return Ok(doc_commands_block(abi));
    }
    if spec == "scalars" {
        let rows: Vec<_> = abi
            .scalars
            .iter()
            .map(|(n, v, d)| (format!("DAVINCI_{n}"), v.to_string(), d.to_string()))
            .collect();
        return Ok(doc_table(&rows));
    }
    if let Some(names) = spec.strip_prefix("bits ") {
        return doc_bits_block(abi, names);
    }
    if let Some(name) = spec.strip_prefix("struct ") {
        let name = name.trim();
        return match structs.iter().find(|r| r.info.c_name == name) {
            Some(r) => Ok(doc_struct_block(r)),
            None => err(format!(
                "{ABI_DOC_PATH}: generated block names unknown struct `{name}`"
            )),
        };
    }
    if let Some(prefix) = spec.strip_prefix("flags ") {
        let prefix = prefix.trim();
        return match abi.flags.iter().find(|f| f.c_prefix == prefix) {
            Some(f) => {
                let rows: Vec<_> = f
                    .bits
                    .iter()
                    .map(|(n, v, d)| (format!("{prefix}{n}"), format!("`{v:#x}`"), d.to_string()))
                    .collect();
                Ok(doc_table(&rows))
            }
            None => err(format!(
                "{ABI_DOC_PATH}: generated block names unknown flag prefix `{prefix}`"
            )),
        };
    }
    if let Some(prefix) = spec.strip_prefix("consts ") {
        let prefix = prefix.trim();
        return match abi
            .const_groups
            .iter()
            .flat_map(|g| g.iter())
            .find(|g| g.c_prefix == prefix)
        {
            Some(g) => {
                let rows: Vec<_> = g
                    .items
                    .iter()
                    .map(|(n, v, d)| (format!("{prefix}{n}"), v.to_string(), d.to_string()))
                    .collect();
                Ok(doc_table(&rows))
            }
            None => err(format!(
                "{ABI_DOC_PATH}: generated block names unknown constant prefix `{prefix}`"
            )),
        };
    }
    err(format!(
        "{ABI_DOC_PATH}: unknown generated block `{spec}` (use commands, scalars, struct NAME, flags PREFIX, consts PREFIX, bits NAME...)"
    ))
}

/// `doc` with every generated block (between `<!-- generated: SPEC -->` and
/// `<!-- end generated -->`) re-rendered from `abi`. Text outside the blocks is kept as is.
///
/// # Errors
/// A block that is not closed, names something unknown, or metadata that cannot be rendered.
pub fn update_doc_with(abi: &Abi<'_>, doc: &str) -> Result<String, GenError> {
    let structs = resolve_all(abi)?;
    let mut out = String::with_capacity(doc.len());
    let mut lines = doc.split_inclusive('\n').enumerate();
    while let Some((_, line)) = lines.next() {
        out.push_str(line);
        let Some(rest) = line.trim().strip_prefix(DOC_BLOCK_START) else {
            continue;
        };
        let Some(spec) = rest.strip_suffix("-->") else {
            return err(format!(
                "{ABI_DOC_PATH}: generated-block marker `{}` does not end with -->",
                line.trim()
            ));
        };
        let block = render_doc_block(abi, &structs, spec)?;
        let mut closed = false;
        for (_, inner) in lines.by_ref() {
            if inner.trim() == DOC_BLOCK_END {
                out.push_str(&block);
                out.push_str(inner);
                closed = true;
                break;
            }
        }
        if !closed {
            return err(format!(
                "{ABI_DOC_PATH}: generated block `{}` has no {DOC_BLOCK_END}",
                spec.trim()
            ));
        }
    }
    Ok(out)
}

/// [`update_doc_with`] for the current ABI.
///
/// # Errors
/// As [`update_doc_with`].
pub fn update_doc(doc: &str) -> Result<String, GenError> {
    update_doc_with(&Abi::current(), doc)
}

// ---------------------------------------------------------------------------------------------
