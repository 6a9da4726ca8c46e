//! `davinci-smi` run as `nvidia-smi` (a symlink of that name on PATH, as consumers find it)
//! against a real `davinci-mockd` with a client holding memory, its output read the way the
//! consumers read it: each `parse_*` below mirrors the named program's own parsing code
//! (tests/nvidia-smi-reference/SOURCES.txt says where each is), so a shape those programs
//! cannot read fails here. The daemon is the workspace's `davinci-mockd` binary (built with
//! the workspace; `DAVINCI_TEST_BIN_DIR` names another directory); without it the test says
//! so and does nothing.
#![forbid(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use davinci_smi::test_util::run;

/// A `davinci-mockd` this test started, stopped (by its pid) on drop.
struct Daemon {
    child: Child,
    dir: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The directory of the workspace's binaries (this test runs from `target/<profile>/deps`).
fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("DAVINCI_TEST_BIN_DIR") {
        return PathBuf::from(d);
    }
    let exe = std::env::current_exe().unwrap();
    let mut dir = exe.parent().unwrap().to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir
}

/// Two devices on PCI addresses 0000:0c:00.0 and 0000:0d:00.0; `None` when there is no
/// daemon binary to start.
fn daemon() -> Option<Daemon> {
    let bin = ["davinci-mockd", "testbin-davinci-mockd"]
        .iter()
        .map(|n| bin_dir().join(n))
        .find(|p| p.exists())?;
    let dir = std::env::temp_dir().join(format!("smi-nvidia-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut child = Command::new(&bin)
        .arg("--socket-dir")
        .arg(&dir)
        .args(["-n", "2", "--bus-id", "0000:0c:00.0", "--exit-with-parent"])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.contains("ready"),
        "{} did not get ready: {line:?}",
        bin.display()
    );
    Some(Daemon { child, dir })
}

/// `nvidia-smi` (a symlink to the built davinci-smi) in a directory of its own.
fn nvidia_smi() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("smi-nvidia-bin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("nvidia-smi");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_davinci-smi"), &link).unwrap();
    link
}

/// Runs `nvidia-smi ARGS` on the daemon's devices: status, stdout, stderr.
fn nv(sock_dir: &Path, args: &[&str]) -> (i32, String, String) {
    run(Command::new(nvidia_smi())
        .args(args)
        .stdin(Stdio::null())
        .env_remove("DAVINCI_DEVICE")
        .env("DAVINCI_SOCKET_DIR", sock_dir))
}

/// Python's `float()` of a value, NaN where it raises (GPUtil's `safeFloatCast`).
fn safe_float(s: &str) -> f64 {
    s.trim().parse().unwrap_or(f64::NAN)
}

/// GPUtil 1.4.0 `getGPUs`: `output.split(os.linesep)`, `numDevices = len(lines) - 1`, each
/// line split at `", "`: `int(index)`, `uuid`, `safeFloatCast(util) / 100`, memory total,
/// used, free, driver, name, serial, display active, display mode, temperature.
#[allow(clippy::type_complexity)]
fn parse_gputil(out: &str) -> Vec<(i64, String, f64, f64, f64, f64, String, String, f64)> {
    let lines: Vec<&str> = out.split('\n').collect();
    (0..lines.len() - 1)
        .map(|g| {
            let v: Vec<&str> = lines[g].split(", ").collect();
            assert_eq!(v.len(), 12, "{:?}", lines[g]);
            (
                v[0].parse().expect("GPUtil: int(vals[0])"),
                v[1].to_string(),
                safe_float(v[2]) / 100.0,
                safe_float(v[3]),
                safe_float(v[4]),
                safe_float(v[5]),
                v[6].to_string(),
                v[7].to_string(),
                safe_float(v[11]),
            )
        })
        .collect()
}

#[test]
fn consumers_read_the_devices_of_a_running_daemon() {
    let Some(d) = daemon() else {
        eprintln!(
            "no davinci-mockd binary in {}: skipped",
            bin_dir().display()
        );
        return;
    };
    let sock = d.dir.clone();
    // A client of davinci1 holding 8 MiB: this test process.
    let path = format!("mock:{}/davinci1.sock", sock.display());
    let dev = davinci_shim::Device::open(&path).expect("open davinci1");
    let _buf = dev.alloc(8 << 20).expect("alloc");

    // GPUtil.
    let q = "--query-gpu=index,uuid,utilization.gpu,memory.total,memory.used,memory.free,\
             driver_version,name,gpu_serial,display_active,display_mode,temperature.gpu";
    let (code, out, err) = nv(&sock, &[q, "--format=csv,noheader,nounits"]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    let gpus = parse_gputil(&out);
    assert_eq!(gpus.len(), 2, "{out}");
    for (i, g) in gpus.iter().enumerate() {
        assert_eq!(g.0, i as i64);
        assert!(g.1.starts_with("GPU-") && g.1.len() == 40, "{}", g.1);
        assert!((0.0..=1.0).contains(&g.2), "load {}", g.2);
        assert_eq!(g.3, 256.0, "memoryTotal");
        assert_eq!(g.4 + g.5, g.3, "used + free");
        assert!(!g.6.is_empty() && !g.7.is_empty());
        assert!(
            g.8.is_finite(),
            "temperature: a device with sensors has one"
        );
    }
    assert_eq!(
        gpus[1].4, 8.0,
        "davinci1's memory.used is the client's 8 MiB"
    );

    // nvsmi: the same GPUs, then the processes, joined by UUID.
    let procs = "--query-compute-apps=pid,process_name,gpu_uuid,gpu_name,used_memory";
    let (code, out, _) = nv(&sock, &[procs, "--format=csv,noheader,nounits"]);
    assert_eq!(code, 0);
    let me: Vec<(i64, String, i64, f64)> = out
        .split('\n')
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Vec<&str> = l.split(", ").collect();
            let id = gpus.iter().find(|g| g.1 == v[2]).map_or(-1, |g| g.0);
            (
                v[0].parse().expect("nvsmi: int(pid)"),
                v[1].to_string(),
                id,
                safe_float(v[4]),
            )
        })
        .collect();
    let mine = me
        .iter()
        .find(|p| p.0 == i64::from(std::process::id()))
        .unwrap_or_else(|| panic!("this process is not listed: {out}"));
    assert_eq!((mine.2, mine.3), (1, 8.0), "{out}");
    let exe = std::env::args().next().unwrap();
    assert_eq!(
        mine.1, exe,
        "process_name is the program as its command line names it"
    );

    // Lightning's GPU stats: seven values, float() or 0.0 each.
    let (code, out, _) = nv(
        &sock,
        &[
            "--query-gpu=utilization.gpu,memory.used,memory.free,utilization.memory,fan.speed,\
             temperature.gpu,temperature.memory",
            "--format=csv,nounits,noheader",
            "--id=1",
        ],
    );
    assert_eq!(code, 0);
    let stats: Vec<f64> = out
        .trim()
        .split(", ")
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    assert_eq!(stats.len(), 7, "{out}");
    assert_eq!((stats[1], stats[2]), (8.0, 248.0), "{out}");
    assert!(stats[5] > 0.0, "temperature.gpu {out}");

    // accelerate: count and names, and the driver version.
    let (code, out, _) = nv(&sock, &["--query-gpu=count,name", "--format=csv,noheader"]);
    assert_eq!(code, 0);
    let names: Vec<String> = out
        .trim()
        .split('\n')
        .map(|g| g.split(',').nth(1).unwrap().trim().to_string())
        .collect();
    assert_eq!(names.len(), 2);
    assert_eq!(names[0], gpus[0].7);
    let (_, drv, _) = nv(
        &sock,
        &["--query-gpu=driver_version", "--format=csv,noheader"],
    );
    assert_eq!(drv.lines().next().unwrap(), gpus[0].6);

    // device-smi: --list-gpus counts the GPUs; info() reads six values; metrics() two.
    let (_, list, _) = nv(&sock, &["--list-gpus"]);
    assert_eq!(list.lines().count(), 2, "{list}");
    let (code, out, _) = nv(
        &sock,
        &[
            "--id=0",
            "--query-gpu=name,memory.total,pci.bus_id,pcie.link.gen.max,pcie.link.gen.current,driver_version",
            "--format=csv,noheader,nounits",
        ],
    );
    assert_eq!(code, 0);
    let v: Vec<&str> = out.trim().split('\n').next().unwrap().split(", ").collect();
    assert_eq!(v.len(), 6, "{out}");
    assert_eq!(v[1].parse::<i64>().unwrap() * 1024 * 1024, 256 << 20);
    assert_eq!(v[2], "00000000:0C:00.0");
    // device-smi's int() of the link generations: the mock's modelled Gen4 link (GET_SENSORS).
    assert_eq!(
        (v[3].parse::<i64>(), v[4].parse::<i64>()),
        (Ok(4), Ok(4)),
        "{out}"
    );
    let (code, out, _) = nv(&sock, &["-q", "-i", "0"]);
    assert_eq!(code, 0);
    assert_eq!(
        out.lines().filter(|l| l.contains("VBIOS")).count(),
        1,
        "{out}"
    );
    let (_, cap, _) = nv(
        &sock,
        &["--format=csv", "--query-gpu=compute_cap", "-i", "0"],
    );
    assert!(cap.starts_with("compute_cap\n"), "{cap}");
    let (_, m, _) = nv(
        &sock,
        &[
            "--id=1",
            "--query-gpu=memory.used,utilization.gpu",
            "--format=csv,noheader,nounits",
        ],
    );
    let (used, util) = m.trim().split_once(", ").unwrap();
    assert_eq!(used.parse::<i64>().unwrap() * 1024 * 1024, 8 << 20);
    assert!(util.parse::<f64>().is_ok(), "{m}");

    // telegraf's nvidia_smi input: -q -x, the first word of each value as a number.
    let (code, xml, err) = nv(&sock, &["-q", "-x"]);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(xml.contains("<!DOCTYPE nvidia_smi_log SYSTEM \"nvsmi_device_v12.dtd\">"));
    let first_word = |tag: &str| -> Vec<String> {
        xml.lines()
            .filter_map(|l| l.trim().strip_prefix(&format!("<{tag}>")))
            .filter_map(|l| {
                l.split('<')
                    .next()?
                    .split_whitespace()
                    .next()
                    .map(str::to_string)
            })
            .collect()
    };
    assert_eq!(
        first_word("total")[..2],
        ["256".to_string(), "256".to_string()]
    );
    assert!(first_word("gpu_temp")
        .iter()
        .all(|t| t.parse::<i64>().is_ok()));
    assert!(first_word("power_draw")
        .iter()
        .all(|p| p.parse::<f64>().is_ok()));
    assert_eq!(first_word("pid"), vec![std::process::id().to_string()]);
}

#[test]
fn without_devices_nvidia_smi_says_so() {
    let dir = std::env::temp_dir().join(format!("smi-nvidia-none-{}", std::process::id()));
    let (code, out, err) = nv(&dir, &["-L"]);
    assert_eq!((code, out.as_str()), (6, "No devices were found\n"));
    assert!(err.contains("no davinci devices found"), "{err}");
    // Through the flag under davinci-smi's own name, and the help of the mode.
    let (code, out, _) =
        run(Command::new(env!("CARGO_BIN_EXE_davinci-smi")).args(["--nvidia-smi", "-h"]));
    assert_eq!(code, 0);
    assert!(
        out.contains("nvidia-smi mode") && out.contains("--query-compute-apps"),
        "{out}"
    );
}
