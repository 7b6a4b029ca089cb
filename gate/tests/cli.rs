//! The gate as a process: installing itself, waiting, being stopped, and letting a member that
//! has run before start without asking anyone. Waiting on real etcd is in the operator's
//! `tests/etcd_real.rs`, which runs the statically linked build that ships in the image.

// Test code, helpers included (clippy.toml covers only #[test] functions): a failing
// unwrap fails the test with the error in its message.
#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const GATE: &str = env!("CARGO_BIN_EXE_etcd-gate");

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("etcd-gate-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Nothing listens here: connecting is refused at once.
fn closed_endpoint() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}", l.local_addr().unwrap())
}

fn wait_cmd(data_dir: &std::path::Path, program: &[&str]) -> Command {
    let mut c = Command::new(GATE);
    c.args([
        "wait",
        "--peer-url=http://m2.c.ns.svc:2380",
        &format!("--endpoints={}", closed_endpoint()),
        &format!("--data-dir={}", data_dir.display()),
        "--poll-ms=50",
        "--",
    ])
    .args(program)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    c
}

fn exited_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

#[test]
fn install_copies_a_runnable_binary() {
    let dir = scratch("install");
    let dest = dir.join("etcd-gate");
    let out = Command::new(GATE)
        .args(["install", dest.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let mode = std::fs::metadata(&dest).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755);
    assert!(!dir.join("etcd-gate.tmp").exists());
    let usage = Command::new(&dest).output().unwrap();
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("etcd-gate install DEST"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_member_with_data_starts_without_asking() {
    let dir = scratch("restart");
    std::fs::create_dir_all(dir.join("member/snap")).unwrap();
    let started = Instant::now();
    let out = wait_cmd(&dir, &["/bin/sh", "-c", "echo \"etcd $0\"; exit 7", "ran"])
        .output()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(1));
    // The gate became the program: its output and its exit status are the program's.
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "etcd ran\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds a member's data"));
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_new_member_waits_and_stops_at_once_when_told() {
    let dir = scratch("waits");
    let mut child = wait_cmd(&dir, &["/bin/sh", "-c", "exit 0"])
        .spawn()
        .unwrap();
    assert_eq!(
        exited_within(&mut child, Duration::from_millis(500)),
        None,
        "started with no member answering"
    );
    let stopped = Instant::now();
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    // SAFETY: signalling our own child; std sends only SIGKILL.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(pid, libc::SIGTERM)
    };
    let status = exited_within(&mut child, Duration::from_secs(2)).expect("SIGTERM ignored");
    assert!(stopped.elapsed() < Duration::from_secs(1));
    assert_eq!(status.code(), Some(143));
    let err = String::from_utf8_lossy(&child.wait_with_output().unwrap().stderr).to_string();
    assert!(err.contains("no member answers"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}
