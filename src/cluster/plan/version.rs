//! etcd versions, and etcd's rules for moving a running cluster from one to another. Pure.
//!
//! etcd supports patch upgrades and one minor version at a time, never down; some minor steps
//! also need every member on a recent enough patch release of the old minor first (etcd's
//! upgrade guides). The CRD's CEL rules judge a spec change against the old spec only; these
//! rules judge it against what the members actually run, which CEL cannot see (a user may ask
//! for 3.5 and then 3.6 before the first roll has finished).

use std::fmt;

/// `major.minor.patch`; a leading `v` and any pre-release or build suffix are ignored, and
/// parts that do not parse count as 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u64,
    pub minor: u64,
    pub patch: u64,
}

impl Version {
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// Parses `3.6.16`, `v3.5.21` or `3.6.0-rc.1`.
    pub fn parse(s: &str) -> Version {
        let mut parts = s
            .trim()
            .trim_start_matches('v')
            .split(['.', '-', '+'])
            .map(|p| p.parse().unwrap_or(0));
        Version {
            major: parts.next().unwrap_or(0),
            minor: parts.next().unwrap_or(0),
            patch: parts.next().unwrap_or(0),
        }
    }

    /// The version in an image reference `<repository>:v<version>`, if its tag is one.
    pub fn of_image(image: &str) -> Option<Version> {
        let (_, tag) = image.rsplit_once(':')?;
        tag.starts_with('v').then(|| Version::parse(tag))
    }

    /// `(major, minor)`.
    pub fn minor_line(self) -> (u64, u64) {
        (self.major, self.minor)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The patch release of the old minor that every member must run before a cluster moves to
/// the next minor, as etcd's upgrade guides require: 3.5 → 3.6 needs 3.5.32 or later (the
/// guide's list grew from 3.5.20 to 3.5.26 to 3.5.32 as upgrade blockers were fixed), 3.6 →
/// 3.7 needs 3.6.11 or later.
pub fn minimum_before(next: (u64, u64)) -> Option<Version> {
    match next {
        (3, 6) => Some(Version::new(3, 5, 32)),
        (3, 7) => Some(Version::new(3, 6, 11)),
        _ => None,
    }
}

/// Whether members running `running` may be moved to `wanted`. `Err` says why not, and what to
/// do. Only the members that answered are judged; the oldest and the newest of them bound
/// the cluster's step.
pub fn step_allowed(wanted: Version, running: &[Version]) -> Result<(), String> {
    let (Some(oldest), Some(newest)) = (running.iter().min(), running.iter().max()) else {
        return Ok(());
    };
    if wanted < *newest {
        return Err(format!(
            "a member runs {newest}, newer than {wanted}: etcd members cannot be downgraded in \
             place"
        ));
    }
    if wanted.major != oldest.major || wanted.minor > oldest.minor + 1 {
        return Err(format!(
            "a member still runs {oldest}, and {wanted} is more than one minor version ahead \
             of it: the cluster moves one minor version at a time"
        ));
    }
    if wanted.minor == oldest.minor + 1
        && let Some(min) = minimum_before(wanted.minor_line())
        && *oldest < min
    {
        return Err(format!(
            "a member runs {oldest}; etcd requires every member on {min} or later before \
             {}.{}: upgrade to the newest {}.{} release first",
            wanted.major, wanted.minor, oldest.major, oldest.minor
        ));
    }
    Ok(())
}

/// The image members keep while the version asked for is not a step etcd allows from the
/// versions `running` ([`step_allowed`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldBack {
    /// The image's repository, without the tag.
    pub repository: String,
    /// Its version, without the `v`.
    pub version: String,
    /// Why the version asked for is not allowed yet.
    pub why: String,
}

/// `None` when `wanted` may be built. Otherwise the newest of `live_images` (the images of
/// member pods not being deleted) whose version a member answers with, so that new and
/// replacement members never move the cluster further than etcd allows, and a roll that was
/// under way (3.4 to 3.5, when 3.6 is asked for meanwhile) finishes first. Only versions that
/// members answer with: a pod that never started (an image that cannot be pulled) must not
/// become every new member's image.
pub fn held_back(wanted: &str, running: &[&str], live_images: &[String]) -> Option<HeldBack> {
    let running: Vec<Version> = running.iter().map(|v| Version::parse(v)).collect();
    let wanted = Version::parse(wanted);
    let why = step_allowed(wanted, &running).err()?;
    let (_, image) = live_images
        .iter()
        .filter_map(|i| Some((Version::of_image(i)?, i)))
        .filter(|(v, _)| *v <= wanted && running.contains(v))
        .max()?;
    let (repository, version) = image.rsplit_once(":v")?;
    Some(HeldBack {
        repository: repository.to_string(),
        version: version.to_string(),
        why,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s)
    }

    #[test]
    fn versions_parse_and_order() {
        assert_eq!(v("v3.6.16"), Version::new(3, 6, 16));
        assert_eq!(v("3.6.0-rc.1"), Version::new(3, 6, 0));
        assert_eq!(v("junk"), Version::default());
        assert!(v("3.5.35") < v("3.6.0"));
        assert!(v("3.5.9") < v("3.5.10"));
        assert_eq!(
            Version::of_image("quay.io/coreos/etcd:v3.5.35"),
            Some(v("3.5.35"))
        );
        assert_eq!(Version::of_image("registry:5000/etcd:latest"), None);
        assert_eq!(v("3.4.23").to_string(), "3.4.23");
    }

    #[test]
    fn a_cluster_moves_one_minor_at_a_time_never_down_and_from_a_recent_enough_patch() {
        let ok = |wanted: &str, running: &[&str]| {
            step_allowed(v(wanted), &running.iter().map(|r| v(r)).collect::<Vec<_>>())
        };
        assert!(ok("3.5.35", &["3.4.23"; 3]).is_ok());
        assert!(ok("3.6.16", &["3.5.35"; 3]).is_ok());
        assert!(ok("3.6.16", &["3.5.35", "3.6.16"]).is_ok());
        assert!(ok("3.6.17", &["3.6.16"]).is_ok());
        assert!(ok("3.6.16", &[]).is_ok());
        // Asked for 3.6 while a member still runs 3.4 (3.5 was asked for a moment ago).
        let e = ok("3.6.16", &["3.4.23", "3.5.35"]).unwrap_err();
        assert!(e.contains("still runs 3.4.23"), "{e}");
        // 3.5 -> 3.6 from a 3.5 patch release etcd does not support for that step.
        let e = ok("3.6.16", &["3.5.21", "3.5.35"]).unwrap_err();
        assert!(e.contains("3.5.32 or later"), "{e}");
        assert!(ok("3.7.0", &["3.6.10"]).is_err());
        assert!(ok("3.7.0", &["3.6.11"]).is_ok());
        // Down, even by a patch release.
        assert!(ok("3.6.15", &["3.6.16"]).is_err());
        assert!(ok("4.0.0", &["3.6.16"]).is_err());
    }
}
