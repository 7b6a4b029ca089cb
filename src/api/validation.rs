//! CEL rules (`x-kubernetes-validations`) that the CRDs carry, so the API server rejects bad
//! input at `kubectl apply` with a message a user understands.
//!
//! The rules only use CEL features every Kubernetes release with CEL validation has (the
//! strings extension and `matches`), not the newer semver library, so the CRDs install on older
//! API servers too. Every rule that parses a version first checks the version's shape, so a
//! malformed version yields the shape message rather than a CEL runtime error.

use schemars::Schema;
use serde_json::{Value, json};

/// Longest EtcdCluster name. The name becomes the client Service `<name>-client` and the member
/// pods' names and host names `<name>-<5 characters>`, each a DNS label of at most 63
/// characters; the Service's suffix is the longer one, so it sets the bound (the member names
/// then stay a character short of the limit).
pub const MAX_NAME_LENGTH: usize = 63 - "-client".len();

/// A version as the API accepts it: `X.Y.Z`, optional leading `v`, optional pre-release.
pub const VERSION_PATTERN: &str =
    r"^v?(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$";

/// CEL expression for numeric part `i` (0 major, 1 minor, 2 patch) of the version in `var`.
fn part(var: &str, i: usize) -> String {
    format!(
        "int(({var}.startsWith('v') ? {var}.substring(1) : {var}).split('.')[{i}].split('-')[0])"
    )
}

fn cel_str(s: &str) -> String {
    format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
}

pub(super) fn rule(rule: String, message: &str) -> Value {
    json!({ "rule": rule, "message": message })
}

fn rule_expr(rule: String, message_expression: &str) -> Value {
    json!({ "rule": rule, "messageExpression": message_expression })
}

pub(super) fn add_rules(schema: &mut Schema, rules: Vec<Value>) {
    let mut all = match schema.remove("x-kubernetes-validations") {
        Some(Value::Array(existing)) => existing,
        _ => Vec::new(),
    };
    all.extend(rules);
    schema.insert("x-kubernetes-validations".into(), Value::Array(all));
}

/// Rules of `EtcdCluster.spec.version`: shape, the 3.4 minimum, and the upgrade path.
pub fn version_rules(schema: &mut Schema) {
    // Bounded length keeps the API server's cost estimate of the string rules small.
    schema.insert("maxLength".into(), json!(64));
    let shape = format!("self.matches({})", cel_str(VERSION_PATTERN));
    let old_shape = format!("oldSelf.matches({})", cel_str(VERSION_PATTERN));
    let (maj, min, pat) = (part("self", 0), part("self", 1), part("self", 2));
    let (omaj, omin, opat) = (part("oldSelf", 0), part("oldSelf", 1), part("oldSelf", 2));
    add_rules(
        schema,
        vec![
            rule_expr(
                shape.clone(),
                "'spec.version must be an etcd release such as 3.6.16 or v3.5.21, got \"' + self + '\"'",
            ),
            rule(
                format!("!{shape} || {maj} > 3 || ({maj} == 3 && {min} >= 4)"),
                "spec.version must be 3.4 or newer: members join as learners, which etcd 3.4 introduced",
            ),
            rule_expr(
                format!(
                    "!{shape} || !{old_shape} || {maj} > {omaj} || ({maj} == {omaj} && ({min} > {omin} || ({min} == {omin} && {pat} >= {opat})))"
                ),
                "'spec.version may not go down (from ' + oldSelf + ' to ' + self + '): etcd members cannot be downgraded in place'",
            ),
            rule_expr(
                format!(
                    "!{shape} || !{old_shape} || {maj} < {omaj} || ({maj} == {omaj} && {min} <= {omin} + 1)"
                ),
                "'spec.version may move up at most one minor version at a time (from ' + oldSelf + ' to ' + self + '): upgrade through each minor release in turn'",
            ),
        ],
    );
}

/// Rules on an EtcdCluster's name: it names the headless Service (a DNS-1035 label), the
/// client Service `<name>-client` and the member pods `<name>-<5 characters>`, whose names are
/// also their host names.
pub fn cluster_name_rules() -> Vec<Value> {
    let max = MAX_NAME_LENGTH;
    vec![
        rule(
            "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')".into(),
            "metadata.name must start with a lower-case letter and hold only lower-case letters, digits and '-' (no dots): it names the cluster's Services and the member pods, whose names are DNS labels",
        ),
        rule(
            format!("size(self.metadata.name) <= {max}"),
            &format!(
                "metadata.name may be at most {max} characters: the client Service is named <name>-client, and a Service name is a DNS label of at most 63 characters"
            ),
        ),
    ]
}

/// Rules of `EtcdCluster.spec.pod.labels`: the operator's selector labels are reserved.
pub fn pod_label_rules(schema: &mut Schema) {
    add_rules(
        schema,
        vec![
            rule(
                "!('app' in self)".into(),
                "spec.pod.labels may not set 'app': the operator labels every member pod app=etcd",
            ),
            rule(
                "self.all(k, !k.startsWith('etcd_'))".into(),
                "spec.pod.labels may not use keys starting with 'etcd_': the operator owns them (etcd_cluster, ...)",
            ),
        ],
    );
}

/// Rules of `EtcdCluster.spec.pod.annotations`: the operator's own keys are reserved (it reads
/// some of them back: a pod-template hash, a restore's UID, a new member's peers).
pub fn pod_annotation_rules(schema: &mut Schema) {
    add_rules(
        schema,
        vec![rule(
            "self.all(k, !k.startsWith('etcd.database.coreos.com/'))".into(),
            "spec.pod.annotations may not use keys under etcd.database.coreos.com/: the operator owns them (pod-template-hash, restore-uid, join-peers, ...)",
        )],
    );
}

/// The most bytes of changes a continuous archive's chunk may hold: the operator keeps about
/// one chunk per archived cluster in memory.
pub const MAX_CHUNK_BYTES: usize = 32 << 20;
/// The fewest: smaller chunks only multiply objects.
pub const MIN_CHUNK_BYTES: usize = 64 << 10;

/// Rules of `continuous.maxChunkBytes`: bytes, `Ki` or `Mi`, from 64Ki to 32Mi, refused
/// rather than clamped when out of range.
pub fn chunk_bytes_rules(schema: &mut Schema) {
    schema.insert("maxLength".into(), json!(12));
    schema.insert("pattern".into(), json!("^[0-9]+(Ki|Mi)?$"));
    let bytes = "(self.endsWith('Mi') ? int(self.substring(0, size(self) - 2)) * 1048576 : \
                 self.endsWith('Ki') ? int(self.substring(0, size(self) - 2)) * 1024 : \
                 int(self))";
    add_rules(
        schema,
        vec![rule_expr(
            format!(
                "!self.matches('^[0-9]+(Ki|Mi)?$') || ({bytes} >= {MIN_CHUNK_BYTES} && {bytes} <= {MAX_CHUNK_BYTES})"
            ),
            "'spec.backupPolicy.continuous.maxChunkBytes must be from 64Ki to 32Mi (the operator holds about one chunk per archived cluster in memory), got ' + self",
        )],
    );
}

/// Rules of `continuous.flushInterval`: a duration such as `5s` or `1m30s`, from 1s to 10m.
pub fn flush_interval_rules(schema: &mut Schema) {
    schema.insert("maxLength".into(), json!(16));
    schema.insert("pattern".into(), json!("^([0-9]+(s|m))+$"));
    add_rules(
        schema,
        vec![rule_expr(
            "!self.matches('^([0-9]+(s|m))+$') || (duration(self) >= duration('1s') && duration(self) <= duration('10m'))".into(),
            "'spec.backupPolicy.continuous.flushInterval must be from 1s to 10m, got ' + self",
        )],
    );
}

/// An image repository: an optional registry host (with a port), then lower-case path
/// components, as container runtimes parse image references. No tag or digest: the
/// operator appends `:v<version>`.
pub const REPOSITORY_PATTERN: &str = r"^(([a-zA-Z0-9-]+\.)*[a-zA-Z0-9-]+(:[0-9]+)?/)?[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*$";

/// Rules tying a storage-type field (`storageType` or `backupStorageType`) to the one storage
/// section (`s3`, `abs`, `gcs`, `oss`) it names.
pub fn storage_section_rules(schema: &mut Schema, type_field: &str) {
    section_rules(schema, type_field, "spec.");
}

/// As [`storage_section_rules`], for a storage section at `at` (its path, for the messages).
fn section_rules(schema: &mut Schema, type_field: &str, at: &str) {
    let t = format!("self.{type_field}");
    let count = "(has(self.s3) ? 1 : 0) + (has(self.abs) ? 1 : 0) + (has(self.gcs) ? 1 : 0) + (has(self.oss) ? 1 : 0)";
    add_rules(
        schema,
        vec![
            rule_expr(
                format!(
                    "{t} == 'S3' ? has(self.s3) : {t} == 'ABS' ? has(self.abs) : {t} == 'GCS' ? has(self.gcs) : {t} == 'OSS' ? has(self.oss) : true"
                ),
                &format!(
                    "'{at}{type_field} is ' + {t} + ', so {at}' + {t}.lowerAscii() + ' must be set'"
                ),
            ),
            rule(
                format!("{count} <= 1"),
                &format!(
                    "only the storage section that {at}{type_field} names may be set (one of s3, abs, gcs, oss)"
                ),
            ),
        ],
    );
}

/// Rules of an EtcdCluster's `spec.recovery.backups`.
pub fn recovery_store_rules(schema: &mut Schema) {
    section_rules(schema, "backupStorageType", "spec.recovery.backups.");
}

/// Rules of `EtcdBackup.spec`.
pub fn backup_spec_rules(schema: &mut Schema) {
    storage_section_rules(schema, "storageType");
    add_rules(
        schema,
        vec![rule(
            "(has(self.etcdEndpoints) && size(self.etcdEndpoints) > 0) != (has(self.clusterName) && self.clusterName != '')".into(),
            "set exactly one of spec.etcdEndpoints (an etcd cluster anywhere) and spec.clusterName (an EtcdCluster in this namespace)",
        ),
        rule(
            "!has(self.backupPolicy) || !has(self.backupPolicy.continuous) || (has(self.backupPolicy.backupIntervalInSecond) && self.backupPolicy.backupIntervalInSecond > 0)".into(),
            "spec.backupPolicy.continuous needs spec.backupPolicy.backupIntervalInSecond > 0: changes are archived from periodic full snapshots",
        )],
    );
}

/// Rules of `EtcdRestore.spec`.
pub fn restore_spec_rules(schema: &mut Schema) {
    storage_section_rules(schema, "backupStorageType");
}

/// Rules of `EtcdRestore.spec.restoreTo`.
pub fn restore_to_rules(schema: &mut Schema) {
    add_rules(
        schema,
        vec![rule(
            "has(self.revision) != has(self.time)".into(),
            "set exactly one of spec.restoreTo.revision and spec.restoreTo.time",
        )],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_parts_are_parsed_after_the_prefix() {
        assert_eq!(
            part("self", 2),
            "int((self.startsWith('v') ? self.substring(1) : self).split('.')[2].split('-')[0])"
        );
    }

    #[test]
    fn patterns_are_quoted_for_cel() {
        assert_eq!(cel_str(r"^a\.b'$"), r"'^a\\.b\'$'");
    }
}
