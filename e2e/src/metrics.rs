//! The operator's metrics and its process's footprint (memory, CPU).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::ToSocketAddrs;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// GET `path` from `addr` (`host:port`) over HTTP/1.0 (the server closes the connection after
/// the response); the body of a 200 response.
pub fn http_get(addr: &str, path: &str) -> Result<String, String> {
    let target = resolve(addr)?;
    let mut stream = TcpStream::connect_timeout(&target, Duration::from_secs(2))
        .map_err(|e| format!("connecting to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .and_then(|()| stream.set_write_timeout(Some(Duration::from_secs(10))))
        .map_err(|e| e.to_string())?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")
        .map_err(|e| format!("writing to {addr}: {e}"))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| format!("reading from {addr}: {e}"))?;
    let response = String::from_utf8_lossy(&response);
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no complete response from {addr}: {response:?}"))?;
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("GET {path} from {addr}: {status}"));
    }
    Ok(body.to_string())
}

pub(crate) fn resolve(addr: &str) -> Result<SocketAddr, String> {
    addr.to_socket_addrs()
        .map_err(|e| format!("resolving {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("{addr} resolves to nothing"))
}

/// The value of a series in a Prometheus or OpenMetrics exposition, its name and labels given
/// exactly as exposed (`name{label="value"}`), if present.
pub fn series(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(name)?
            .strip_prefix(' ')?
            .split(' ')
            .next()?
            .parse()
            .ok()
    })
}

/// Every series of metric `name` in a Prometheus or OpenMetrics exposition, as its labels
/// (name to value) and its value: `name{a="x",b="y"} 3` gives `({a: x, b: y}, 3.0)`. Label
/// values with escaped quotes or commas are not expected (ours have none).
pub fn labelled_series(metrics: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    metrics
        .lines()
        .filter_map(|l| {
            let (labels, rest) = l.strip_prefix(name)?.strip_prefix('{')?.split_once("} ")?;
            let value = rest.split(' ').next()?.parse().ok()?;
            let labels = labels
                .split(',')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_string(), v.trim_matches('"').to_string()))
                })
                .collect::<Option<_>>()?;
            Some((labels, value))
        })
        .collect()
}

/// The operator's count of its requests to the Kubernetes API.
pub const API_REQUESTS: &str = "etcd_operator_api_requests_total";

/// The operator's requests to the Kubernetes API so far, by `(verb, resource)`
/// ([`API_REQUESTS`]).
pub fn api_requests(metrics: &str) -> BTreeMap<(String, String), f64> {
    labelled_series(metrics, API_REQUESTS)
        .into_iter()
        .map(|(mut labels, v)| {
            let verb = labels.remove("verb").unwrap_or_default();
            let resource = labels.remove("resource").unwrap_or_default();
            ((verb, resource), v)
        })
        .collect()
}

/// The requests made between two readings of [`api_requests`]: those that moved, by how much.
pub fn requests_since(
    before: &BTreeMap<(String, String), f64>,
    after: &BTreeMap<(String, String), f64>,
) -> BTreeMap<(String, String), f64> {
    after
        .iter()
        .map(|(key, n)| (key.clone(), n - before.get(key).copied().unwrap_or(0.0)))
        .filter(|(_, delta)| *delta > 0.0)
        .collect()
}

/// The resident set of process `pid` (`VmRSS` in `/proc/PID/status`), in KiB; 0 when the
/// process is gone.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Clock ticks per second of the CPU times in `/proc/PID/stat` (`USER_HZ`, what
/// `sysconf(_SC_CLK_TCK)` and `getconf CLK_TCK` report): 100 on every architecture Linux exposes
/// to user space with a fixed value, whatever the kernel's internal `HZ`. Fixed here rather than
/// asked for, to need no libc binding; one tick is 10 ms.
pub const CLK_TCK: u64 = 100;

/// CPU time a process has used so far, user plus system (`utime` + `stime`, fields 14 and 15 of
/// `/proc/PID/stat`), in ticks of [`CLK_TCK`] per second. Panics when the process is gone.
pub fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap_or_else(|e| panic!("reading /proc/{pid}/stat: {e}"));
    stat_cpu_ticks(&stat).unwrap_or_else(|| panic!("no CPU times in /proc/{pid}/stat: {stat}"))
}

/// utime + stime from the text of `/proc/PID/stat`. Field 2, the command name, is in
/// parentheses and may hold spaces and parentheses itself, so fields are counted after the last
/// `)`: the first there is field 3 (the state).
pub(crate) fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(14 - 3)?.parse().ok()?;
    let stime: u64 = fields.get(15 - 3)?.parse().ok()?;
    Some(utime + stime)
}

/// The host PID of the operator process running in pod `pod`, when this machine runs it (the
/// local cluster's node is this host): found by its `POD_NAME` environment variable.
pub fn host_pid(pod: &str) -> Option<u32> {
    host_process(
        b"/usr/local/bin/etcd-operator\0run",
        &format!("POD_NAME={pod}"),
    )
}

/// The host PID of the etcd process of member pod `pod` (its HOSTNAME is the member's name),
/// when this machine runs it (the local cluster's node is this host).
pub fn etcd_pid(pod: &str) -> Option<u32> {
    host_process(b"/usr/local/bin/etcd\0", &format!("HOSTNAME={pod}"))
}

/// The host PID of a process whose command line starts with `cmdline` and whose environment
/// holds `env` (`NAME=value`): how tests find a container's process on the local cluster's
/// node, which is this host.
pub fn host_process(cmdline: &[u8], env: &str) -> Option<u32> {
    let needle = format!("{env}\0");
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let e = e.ok()?;
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let own = std::fs::read(e.path().join("cmdline")).ok()?;
        let environ = std::fs::read(e.path().join("environ")).ok()?;
        (own.starts_with(cmdline)
            && environ
                .windows(needle.len())
                .any(|w| w == needle.as_bytes()))
        .then_some(pid)
    })
}
