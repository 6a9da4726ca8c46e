//! Replays, on stable, every checked-in input of every fuzz target: the seed corpora
//! (`fuzz/seeds/<target>/`, where each libFuzzer run starts) and every finding ever made
//! (`fuzz/regressions/<target>/<name>`), through the very functions libFuzzer drives.
//! A directory under `fuzz/seeds` or `fuzz/regressions` that names no target fails the test
//! (a renamed target must take its inputs along).

use std::path::{Path, PathBuf};

use davinci_fuzz_harness::TARGETS;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join(kind).join(target);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut v: Vec<PathBuf> = rd
        .map(|e| e.expect("read a directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

fn replay(kind: &str) -> usize {
    let mut n = 0;
    for (target, run) in TARGETS {
        for p in inputs(kind, target) {
            let data = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            eprintln!(
                "{kind}/{target}/{}",
                p.file_name().unwrap().to_string_lossy()
            );
            run(&data);
            n += 1;
        }
    }
    n
}

fn no_strays(kind: &str) {
    let Ok(rd) = std::fs::read_dir(fuzz_dir().join(kind)) else {
        return;
    };
    for e in rd {
        let name = e.expect("read a directory entry").file_name();
        let name = name.to_string_lossy();
        assert!(
            TARGETS.iter().any(|(t, _)| *t == name),
            "fuzz/{kind}/{name} names no fuzz target"
        );
    }
}

#[test]
fn regressions_replay() {
    no_strays("regressions");
    let n = replay("regressions");
    assert!(n > 0, "no regression inputs found under fuzz/regressions");
}

#[test]
fn seeds_replay() {
    no_strays("seeds");
    let n = replay("seeds");
    eprintln!("{n} seed inputs replayed");
    for (target, _) in TARGETS {
        assert!(
            !inputs("seeds", target).is_empty(),
            "fuzz/seeds/{target} is empty: every target starts from a checked-in corpus"
        );
    }
}
