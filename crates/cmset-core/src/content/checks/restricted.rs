//! What a check's pod template may not ask for: whatever the Pod Security Standards' `restricted`
//! profile refuses, and any service-account identity.
//!
//! cmset's lock-down sets the safe values where the template is silent (`runAsNonRoot`, `seccompProfile`,
//! `drop: [ALL]`, ...), so only what the template itself asks for is refused here: a template that asks
//! for root or a host port is told so, rather than silently run as something else.

use k8s_openapi::api::core::v1::{
    Capabilities, Container, PodSecurityContext, PodSpec, SELinuxOptions, SeccompProfile, SecurityContext,
    Volume, WindowsSecurityContextOptions,
};

/// Where every field path of a refusal starts: the check's `jobTemplate`.
const POD: &str = "spec.template.spec";

/// Volume types the restricted profile allows.
const ALLOWED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The only capability the restricted profile lets a container add.
pub const ALLOWED_CAPABILITY: &str = "NET_BIND_SERVICE";

/// Sysctls the baseline (and so restricted) profile allows: namespaced and safe.
const SAFE_SYSCTLS: [&str; 5] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
];

/// SELinux types the baseline profile allows (or none).
const SELINUX_TYPES: [&str; 3] = ["container_t", "container_init_t", "container_kvm_t"];

const RESTRICTED: &str = "restricted profile";
const NO_IDENTITY: &str = "checks run without a service account";

/// One field of the template a check may not have, with the value asked for and the rule it breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Its path from the `jobTemplate`, e.g. `spec.template.spec.containers[0].securityContext.runAsUser`.
    pub field: String,
    /// The value asked for, as JSON.
    pub value: String,
    pub why: &'static str,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} is not allowed ({})", self.field, self.value, self.why)
    }
}

/// Every field of `pod` (a check's pod template, before cmset locks it down) that the restricted
/// profile refuses or that gives the pod a service-account identity, in the order of the spec.
pub fn refusals(pod: &PodSpec) -> Vec<Refusal> {
    let mut found = Vec::new();
    let mut refuse = |field: String, value: String, why| found.push(Refusal { field, value, why });

    for (field, name) in [
        ("serviceAccountName", &pod.service_account_name),
        ("serviceAccount", &pod.service_account),
    ] {
        if let Some(name) = name.as_ref().filter(|n| !n.is_empty()) {
            refuse(format!("{POD}.{field}"), quoted(name), NO_IDENTITY);
        }
    }
    if pod.automount_service_account_token == Some(true) {
        refuse(
            format!("{POD}.automountServiceAccountToken"),
            "true".into(),
            NO_IDENTITY,
        );
    }
    for (field, on) in [
        ("hostNetwork", pod.host_network),
        ("hostPID", pod.host_pid),
        ("hostIPC", pod.host_ipc),
    ] {
        if on == Some(true) {
            refuse(format!("{POD}.{field}"), "true".into(), RESTRICTED);
        }
    }
    if let Some(psc) = &pod.security_context {
        pod_security_context(psc, &format!("{POD}.securityContext"), &mut refuse);
    }
    for (i, volume) in pod.volumes.iter().flatten().enumerate() {
        self::volume(volume, &format!("{POD}.volumes[{i}]"), &mut refuse);
    }
    let init = pod.init_containers.iter().flatten().enumerate();
    for (i, c) in init {
        container(c, &format!("{POD}.initContainers[{i}]"), &mut refuse);
    }
    for (i, c) in pod.containers.iter().enumerate() {
        container(c, &format!("{POD}.containers[{i}]"), &mut refuse);
    }
    found
}

type Refuse<'a> = dyn FnMut(String, String, &'static str) + 'a;

fn pod_security_context(psc: &PodSecurityContext, at: &str, refuse: &mut Refuse<'_>) {
    common(
        psc.run_as_non_root,
        psc.run_as_user,
        psc.seccomp_profile.as_ref(),
        psc.se_linux_options.as_ref(),
        psc.windows_options.as_ref(),
        at,
        refuse,
    );
    for (i, sysctl) in psc.sysctls.iter().flatten().enumerate() {
        if !SAFE_SYSCTLS.contains(&sysctl.name.as_str()) {
            refuse(
                format!("{at}.sysctls[{i}].name"),
                quoted(&sysctl.name),
                RESTRICTED,
            );
        }
    }
}

fn container(c: &Container, at: &str, refuse: &mut Refuse<'_>) {
    for (i, port) in c.ports.iter().flatten().enumerate() {
        if let Some(host_port) = port.host_port.filter(|p| *p != 0) {
            refuse(
                format!("{at}.ports[{i}].hostPort"),
                host_port.to_string(),
                RESTRICTED,
            );
        }
    }
    let Some(sc) = &c.security_context else { return };
    let at = format!("{at}.securityContext");
    if sc.privileged == Some(true) {
        refuse(format!("{at}.privileged"), "true".into(), RESTRICTED);
    }
    if sc.allow_privilege_escalation == Some(true) {
        refuse(
            format!("{at}.allowPrivilegeEscalation"),
            "true".into(),
            RESTRICTED,
        );
    }
    if let Some(Capabilities { add: Some(add), .. }) = &sc.capabilities {
        for (i, cap) in add.iter().enumerate() {
            if cap != ALLOWED_CAPABILITY {
                refuse(format!("{at}.capabilities.add[{i}]"), quoted(cap), RESTRICTED);
            }
        }
    }
    if let Some(proc_mount) = sc.proc_mount.as_ref().filter(|p| *p != "Default") {
        refuse(format!("{at}.procMount"), quoted(proc_mount), RESTRICTED);
    }
    security_context(sc, &at, refuse);
}

fn security_context(sc: &SecurityContext, at: &str, refuse: &mut Refuse<'_>) {
    common(
        sc.run_as_non_root,
        sc.run_as_user,
        sc.seccomp_profile.as_ref(),
        sc.se_linux_options.as_ref(),
        sc.windows_options.as_ref(),
        at,
        refuse,
    );
}

/// The fields a pod's and a container's security contexts share.
fn common(
    run_as_non_root: Option<bool>,
    run_as_user: Option<i64>,
    seccomp: Option<&SeccompProfile>,
    selinux: Option<&SELinuxOptions>,
    windows: Option<&WindowsSecurityContextOptions>,
    at: &str,
    refuse: &mut Refuse<'_>,
) {
    if run_as_non_root == Some(false) {
        refuse(format!("{at}.runAsNonRoot"), "false".into(), RESTRICTED);
    }
    if run_as_user == Some(0) {
        refuse(format!("{at}.runAsUser"), "0".into(), RESTRICTED);
    }
    if let Some(profile) = seccomp.filter(|p| !matches!(p.type_.as_str(), "RuntimeDefault" | "Localhost")) {
        refuse(
            format!("{at}.seccompProfile.type"),
            quoted(&profile.type_),
            RESTRICTED,
        );
    }
    if let Some(selinux) = selinux {
        if let Some(t) = selinux
            .type_
            .as_ref()
            .filter(|t| !t.is_empty() && !SELINUX_TYPES.contains(&t.as_str()))
        {
            refuse(format!("{at}.seLinuxOptions.type"), quoted(t), RESTRICTED);
        }
        for (field, value) in [("user", &selinux.user), ("role", &selinux.role)] {
            if let Some(value) = value.as_ref().filter(|v| !v.is_empty()) {
                refuse(format!("{at}.seLinuxOptions.{field}"), quoted(value), RESTRICTED);
            }
        }
    }
    if windows.and_then(|w| w.host_process) == Some(true) {
        refuse(
            format!("{at}.windowsOptions.hostProcess"),
            "true".into(),
            RESTRICTED,
        );
    }
}

fn volume(volume: &Volume, at: &str, refuse: &mut Refuse<'_>) {
    // A volume is its name and one source; the source is the one other key of its JSON.
    let json = serde_json::to_value(volume).unwrap_or_default();
    let sources = json
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .filter(|k| *k != "name");
    for source in sources {
        if !ALLOWED_VOLUMES.contains(&source.as_str()) {
            refuse(format!("{at}.{source}"), quoted(&volume.name), RESTRICTED);
        }
    }
    let projected = volume.projected.iter().flat_map(|p| p.sources.iter().flatten());
    for (i, source) in projected.enumerate() {
        if let Some(token) = &source.service_account_token {
            let value = serde_json::to_string(token).unwrap_or_default();
            refuse(
                format!("{at}.projected.sources[{i}].serviceAccountToken"),
                value,
                NO_IDENTITY,
            );
        }
    }
}

fn quoted(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn pod(spec: Value) -> PodSpec {
        serde_json::from_value(spec).expect("a pod spec")
    }

    fn first(spec: Value) -> String {
        refusals(&pod(spec))
            .first()
            .map(ToString::to_string)
            .unwrap_or_default()
    }

    /// A container `t` with `extra` merged in.
    fn with_container(extra: Value) -> Value {
        let mut c = json!({"name": "t", "image": "i"});
        for (k, v) in extra.as_object().expect("an object") {
            c[k] = v.clone();
        }
        json!({"containers": [c]})
    }

    #[test]
    fn each_refusal_names_its_field_and_value() {
        let c = "spec.template.spec.containers[0]";
        let cases: Vec<(Value, String)> = vec![
            (
                json!({"containers": [{"name": "t"}], "serviceAccountName": "builder"}),
                r#"spec.template.spec.serviceAccountName: "builder" is not allowed (checks run without a service account)"#.into(),
            ),
            (
                json!({"containers": [{"name": "t"}], "serviceAccount": "builder"}),
                r#"spec.template.spec.serviceAccount: "builder" is not allowed (checks run without a service account)"#.into(),
            ),
            (
                json!({"containers": [{"name": "t"}], "automountServiceAccountToken": true}),
                "spec.template.spec.automountServiceAccountToken: true is not allowed (checks run without a service account)".into(),
            ),
            (
                json!({"containers": [{"name": "t"}], "hostNetwork": true}),
                "spec.template.spec.hostNetwork: true is not allowed (restricted profile)".into(),
            ),
            (
                json!({"containers": [{"name": "t"}], "hostPID": true}),
                "spec.template.spec.hostPID: true is not allowed (restricted profile)".into(),
            ),
            (
                json!({"containers": [{"name": "t"}], "hostIPC": true}),
                "spec.template.spec.hostIPC: true is not allowed (restricted profile)".into(),
            ),
            (
                json!({"containers": [{"name": "t"}], "securityContext": {"runAsUser": 0}}),
                "spec.template.spec.securityContext.runAsUser: 0 is not allowed (restricted profile)".into(),
            ),
            (
                json!({"containers": [{"name": "t"}], "securityContext": {"runAsNonRoot": false}}),
                "spec.template.spec.securityContext.runAsNonRoot: false is not allowed (restricted profile)".into(),
            ),
            (
                json!({"containers": [{"name": "t"}], "securityContext": {"sysctls": [
                    {"name": "net.ipv4.tcp_syncookies", "value": "1"},
                    {"name": "kernel.msgmax", "value": "1"}]}}),
                r#"spec.template.spec.securityContext.sysctls[1].name: "kernel.msgmax" is not allowed (restricted profile)"#.into(),
            ),
            (
                json!({"containers": [{"name": "t"}], "securityContext": {"seccompProfile": {"type": "Unconfined"}}}),
                r#"spec.template.spec.securityContext.seccompProfile.type: "Unconfined" is not allowed (restricted profile)"#.into(),
            ),
            (
                json!({"containers": [{"name": "t"}], "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}),
                r#"spec.template.spec.volumes[0].hostPath: "h" is not allowed (restricted profile)"#.into(),
            ),
            (
                json!({"containers": [{"name": "t"}], "volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]}),
                r#"spec.template.spec.volumes[0].nfs: "n" is not allowed (restricted profile)"#.into(),
            ),
            (
                json!({"containers": [{"name": "t"}], "volumes": [{"name": "tok", "projected": {"sources": [
                    {"configMap": {"name": "web"}}, {"serviceAccountToken": {"path": "token"}}]}}]}),
                r#"spec.template.spec.volumes[0].projected.sources[1].serviceAccountToken: {"path":"token"} is not allowed (checks run without a service account)"#.into(),
            ),
            (
                with_container(json!({"ports": [{"containerPort": 80, "hostPort": 8080}]})),
                format!("{c}.ports[0].hostPort: 8080 is not allowed (restricted profile)"),
            ),
            (
                with_container(json!({"securityContext": {"privileged": true}})),
                format!("{c}.securityContext.privileged: true is not allowed (restricted profile)"),
            ),
            (
                with_container(json!({"securityContext": {"allowPrivilegeEscalation": true}})),
                format!("{c}.securityContext.allowPrivilegeEscalation: true is not allowed (restricted profile)"),
            ),
            (
                with_container(json!({"securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE", "NET_ADMIN"]}}})),
                format!(r#"{c}.securityContext.capabilities.add[1]: "NET_ADMIN" is not allowed (restricted profile)"#),
            ),
            (
                with_container(json!({"securityContext": {"runAsUser": 0}})),
                format!("{c}.securityContext.runAsUser: 0 is not allowed (restricted profile)"),
            ),
            (
                with_container(json!({"securityContext": {"runAsNonRoot": false}})),
                format!("{c}.securityContext.runAsNonRoot: false is not allowed (restricted profile)"),
            ),
            (
                with_container(json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}})),
                format!(r#"{c}.securityContext.seccompProfile.type: "Unconfined" is not allowed (restricted profile)"#),
            ),
            (
                with_container(json!({"securityContext": {"procMount": "Unmasked"}})),
                format!(r#"{c}.securityContext.procMount: "Unmasked" is not allowed (restricted profile)"#),
            ),
            (
                with_container(json!({"securityContext": {"seLinuxOptions": {"type": "spc_t"}}})),
                format!(r#"{c}.securityContext.seLinuxOptions.type: "spc_t" is not allowed (restricted profile)"#),
            ),
            (
                with_container(json!({"securityContext": {"seLinuxOptions": {"user": "root"}}})),
                format!(r#"{c}.securityContext.seLinuxOptions.user: "root" is not allowed (restricted profile)"#),
            ),
            (
                with_container(json!({"securityContext": {"windowsOptions": {"hostProcess": true}}})),
                format!("{c}.securityContext.windowsOptions.hostProcess: true is not allowed (restricted profile)"),
            ),
            (
                json!({"containers": [{"name": "t"}], "initContainers": [{"name": "i", "securityContext": {"privileged": true}}]}),
                "spec.template.spec.initContainers[0].securityContext.privileged: true is not allowed (restricted profile)".into(),
            ),
        ];
        for (spec, message) in cases {
            assert_eq!(first(spec.clone()), message, "{spec}");
        }
    }

    #[test]
    fn what_restricted_allows_or_cmset_sets_itself_is_not_refused() {
        let allowed = json!({
            "automountServiceAccountToken": false,
            "hostNetwork": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"},
                "sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"}]},
            "containers": [{"name": "t", "image": "i", "ports": [{"containerPort": 80}],
                "securityContext": {"privileged": false, "allowPrivilegeEscalation": false, "runAsNonRoot": true,
                    "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                    "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"},
                    "seLinuxOptions": {"type": "container_t", "level": "s0:c1"}, "procMount": "Default"}}],
            "volumes": [{"name": "a", "configMap": {"name": "web"}}, {"name": "b", "secret": {"secretName": "s"}},
                {"name": "c", "emptyDir": {}}, {"name": "d", "downwardAPI": {}},
                {"name": "e", "persistentVolumeClaim": {"claimName": "x"}},
                {"name": "f", "projected": {"sources": [{"configMap": {"name": "web"}}]}},
                {"name": "g", "csi": {"driver": "d"}}, {"name": "h", "ephemeral": {}}]
        });
        assert_eq!(refusals(&pod(allowed)), vec![]);
        // A silent template: cmset's lock-down fills in the safe values.
        assert_eq!(
            refusals(&pod(json!({"containers": [{"name": "t", "image": "i"}]}))),
            vec![]
        );
    }

    #[test]
    fn every_refusal_is_listed_in_spec_order() {
        let spec = json!({"hostNetwork": true, "serviceAccountName": "sa",
            "containers": [{"name": "t", "securityContext": {"runAsUser": 0, "privileged": true}}]});
        let fields: Vec<String> = refusals(&pod(spec)).into_iter().map(|r| r.field).collect();
        assert_eq!(
            fields,
            [
                "spec.template.spec.serviceAccountName",
                "spec.template.spec.hostNetwork",
                "spec.template.spec.containers[0].securityContext.privileged",
                "spec.template.spec.containers[0].securityContext.runAsUser",
            ]
        );
    }
}
