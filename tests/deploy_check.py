"""Checks the Kubernetes manifests under deploy/ (tests/deploy_test.sh).

For every overlay in deploy/overlays/*: renders it with `kubectl kustomize`
(no cluster needed), validates every object against the Kubernetes API
schema offline (kubernetes-validate, strict: unknown fields are errors), and
checks the cross-references a schema cannot see:
  - every flag of every container exists in that binary's --help;
  - ports: probes name container ports, the servers' --port/--health_port/
    --metrics_port match their named container ports, the probes use the
    health port, the scrape annotation names the metrics port, every
    Service's selector matches pods and its target ports exist there, the
    NetworkPolicy opens the gRPC port to the workers' labels;
  - ConfigMaps, Secrets and PersistentVolumeClaims that pods use are
    rendered, or listed in deploy/EXTERNAL (and documented in
    deploy/README.md); a ConfigMap's file that a flag names exists in it;
  - every absolute path a flag names lies under a volume mount (the root
    file system is read-only); a file of a Secret/ConfigMap/projected
    volume that a flag names exists in it (items) and the container's user
    can read it, with the modes and owners the kubelet gives (defaultMode,
    item mode, fsGroup; runAsUser/runAsGroup/supplementalGroups), and the
    server's key and token files pass its own permission check;
  - the counts agree: server replicas = --num_shards = the workers'
    --servers list (in ordinal order, with the Service's DNS names) = the
    DeepSpeed config's zeroshard.servers; Job completions = parallelism =
    ZEROSHARD_WORLD_SIZE; ZEROSHARD_COORD names rank 0's pod; workers use
    TLS (--tls_ca) exactly when the servers do (--tls_cert);
  - --elastic workers: an elastic Indexed Job (completions = parallelism;
    not a StatefulSet, which restarts them after the last step), no
    ZEROSHARD_RANK/WORLD_SIZE/COORD, --start_workers = the initial
    parallelism >= --min_workers, --checkpoint_interval > 0, --worker_name
    = the pod name or built from the completion index, the servers have
    --checkpoint_dir, and
    the NetworkPolicy admits the workers from each other on every port;
  - PodMonitors (components/monitoring; shape checked here, the API schema
    lacks the CRD) select pods, name their metrics port and path, and the
    NetworkPolicies admit the Prometheus Operator's pods on that port;
  - a fixed-size Job has activeDeadlineSeconds and a podFailurePolicy
    failing the run at the first rank that exits non-zero (naming its
    container), and ZEROSHARD_COORD does not assume the cluster domain.
With --self_test it also breaks a rendering in several ways and requires
each to be reported (the checks can fail).

Usage: deploy_check.py --deploy DIR --kubectl PATH --binary NAME=PATH ...
Prints one line per overlay; exits 1 listing every problem.
"""

import argparse
import copy
import fnmatch
import json
import os
import re
import subprocess
import sys

import kubernetes_validate
import yaml

K8S_VERSION = "1.32.0"  # the kubectl client this project uses
POD_KINDS = {"StatefulSet", "Job", "Deployment", "DaemonSet"}


def render(kubectl, path):
    out = subprocess.run([kubectl, "kustomize", path], check=True,
                         capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def help_flags(binary):
    """The flag names a binary's --help lists."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True)
    flags = set(re.findall(r"^\s+--([A-Za-z0-9_]+)", out.stdout, re.M))
    if not flags:
        raise RuntimeError(f"{binary} --help lists no flags")
    return flags


def flag_items(args):
    """(name, value or None) of every --flag in a container's args."""
    for a in args or []:
        if a.startswith("--"):
            name, _, value = a[2:].partition("=")
            yield name.replace("-", "_"), (value if "=" in a else None)


def pod_spec(obj):
    return obj["spec"]["template"]["spec"]


def pod_labels(obj):
    return obj["spec"]["template"]["metadata"].get("labels", {})


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def container_ports(c):
    return {p["containerPort"]: p.get("name") for p in c.get("ports", [])}


def resolve_port(c, port):
    """A probe's or Service's port (number or name) as a number, or None."""
    for number, name in container_ports(c).items():
        if port in (number, name):
            return number
    return None


# The user and group the images run as when a pod sets neither runAsUser nor
# runAsGroup (deploy/images/Containerfile.rootfs: USER 65532:65532).
IMAGE_UID = IMAGE_GID = 65532
# Flags whose file zeroshard-server refuses when its mode is too open
# (common/security/secret_file.cc).
SERVER_SECRET_FLAGS = ("tls_key", "token_file")


# The label every Prometheus pod of the Prometheus Operator carries
# (kube-prometheus-stack's too); components/monitoring admits it.
PROMETHEUS_POD = {"app.kubernetes.io/name": "prometheus"}


def mounted_file(vol, rel, fs_group):
    """(uid, gid, mode) of file `rel` of a Secret, ConfigMap, projected or
    downwardAPI volume as the kubelet writes it, or None if the volume has
    no such file (its items list others), or "?" for other volume kinds.

    The kubelet writes these files owned by root:root with the item's mode,
    else the volume's defaultMode (0644 when unset). With a pod fsGroup it
    then gives them to that group and adds read for the group and owner
    (mode | 0440, read-only volumes: SetVolumeOwnership). Not modelled: a
    projected serviceAccountToken (owned by runAsUser, 0600), which these
    manifests do not mount."""
    kind = next((k for k in ("secret", "configMap", "projected", "downwardAPI")
                 if k in vol), None)
    if kind is None:
        return "?"
    src = vol[kind]
    mode = src.get("defaultMode", 0o644)
    if kind == "projected":
        items = [i for s in src.get("sources", []) for k in ("secret", "configMap")
                 if k in s for i in s[k].get("items", [])]
        listed = all(s.get(k, {}).get("items") for s in src.get("sources", [])
                     for k in ("secret", "configMap") if k in s)
    else:
        items = src.get("items", [])
        listed = bool(items)
    if listed:
        item = next((i for i in items if i["path"] == rel), None)
        if item is None:
            return None
        mode = item.get("mode", mode)
    gid = 0
    if fs_group is not None:
        gid, mode = fs_group, mode | 0o440
    return 0, gid, mode & 0o777


def process_ids(spec, c):
    """(uid, primary gid, all gids, capabilities dropped: all) of a
    container's process."""
    psc, csc = spec.get("securityContext", {}), c.get("securityContext", {})
    uid = csc.get("runAsUser", psc.get("runAsUser", IMAGE_UID))
    gid = csc.get("runAsGroup", psc.get("runAsGroup", IMAGE_GID))
    groups = {gid, *psc.get("supplementalGroups", [])}
    if psc.get("fsGroup") is not None:
        groups.add(psc["fsGroup"])
    dropped = "ALL" in csc.get("capabilities", {}).get("drop", [])
    return uid, gid, groups, dropped


def can_read(uid, groups, dropped, f):
    """Whether a process (uid, groups) reads a file (owner, group, mode):
    owner bits for its owner, group bits for a member, else other bits;
    root with its capabilities reads anything."""
    fuid, fgid, mode = f
    if uid == 0 and not dropped:
        return True
    if uid == fuid:
        return bool(mode & 0o400)
    if fgid in groups:
        return bool(mode & 0o040)
    return bool(mode & 0o004)


def secret_mode_ok(mode, file_uid, euid):
    """zeroshard-server's CheckSecretFileMode: no access for others; group
    read only for a root-owned file read by a non-root server."""
    perm = mode & 0o777
    if perm & 0o007:
        return False
    return perm & 0o070 == 0 or (perm & 0o070 == 0o040 and file_uid == 0 and euid != 0)


def check(objs, helps, external, errors):
    def err(obj, msg):
        errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {msg}")

    by_kind = {}
    for o in objs:
        by_kind.setdefault(o["kind"], {})[o["metadata"]["name"]] = o
    workloads = [o for o in objs if o["kind"] in POD_KINDS]

    def exists(kind, name):
        return name in by_kind.get(kind, {}) or (kind, name) in external

    for w in workloads:
        spec = pod_spec(w)
        mounts_by_volume = {v["name"]: v for v in spec.get("volumes", [])}
        for v in spec.get("volumes", []):
            if "configMap" in v and not exists("ConfigMap", v["configMap"]["name"]):
                err(w, f"ConfigMap {v['configMap']['name']} does not exist")
            if "secret" in v and not exists("Secret", v["secret"]["secretName"]):
                err(w, f"Secret {v['secret']['secretName']} does not exist")
            pvc = v.get("persistentVolumeClaim")
            if pvc and not exists("PersistentVolumeClaim", pvc["claimName"]):
                err(w, f"PersistentVolumeClaim {pvc['claimName']} does not exist")
        templates = {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
        for c in spec["containers"]:
            for e in c.get("env", []):
                ref = e.get("valueFrom", {})
                for key, kind in (("configMapKeyRef", "ConfigMap"), ("secretKeyRef", "Secret")):
                    if key in ref and not exists(kind, ref[key]["name"]):
                        err(w, f"env {e['name']}: {kind} {ref[key]['name']} does not exist")
            mounts = c.get("volumeMounts", [])
            for m in mounts:
                if m["name"] not in mounts_by_volume and m["name"] not in templates:
                    err(w, f"volumeMount {m['name']} has no volume")
            if "/" not in c.get("image", ""):
                err(w, f"container {c['name']}: image {c.get('image')} names no registry "
                       f"(no kustomization's images: rewrote it; it would be pulled from Docker Hub)")
            binary = os.path.basename(c["command"][0])
            if binary not in helps:
                err(w, f"container {c['name']} runs {binary}, which the test does not know")
                continue
            flags = dict(flag_items(c.get("args")))
            for name in flags:
                if name not in helps[binary] and not (
                        name.startswith("no") and name[2:].lstrip("_") in helps[binary]):
                    err(w, f"{binary} has no flag --{name} (not in its --help)")
            if "insecure" in flags and "tls_cert" in flags:
                err(w, "both --insecure and --tls_cert")
            for name, value in flags.items():
                if not value or not value.startswith("/"):
                    continue
                under = [m for m in mounts if value == m["mountPath"] or
                         value.startswith(m["mountPath"].rstrip("/") + "/")]
                if not under:
                    err(w, f"--{name}={value} is not under any volume mount")
                    continue
                m = max(under, key=lambda m: len(m["mountPath"]))
                vol = mounts_by_volume.get(m["name"], {})
                rel = os.path.relpath(value, m["mountPath"])
                f = mounted_file(vol, rel, spec.get("securityContext", {}).get("fsGroup"))
                if f is None:
                    err(w, f"--{name}={value}: volume {m['name']} has no file {rel} (its items list others)")
                elif f != "?":
                    uid, gid, groups, dropped = process_ids(spec, c)
                    if not can_read(uid, groups, dropped, f):
                        err(w, f"--{name}={value}: container {c['name']} (uid {uid}, groups "
                               f"{sorted(groups)}) cannot read it: mounted {f[0]}:{f[1]} "
                               f"mode {f[2]:04o} (set the pod's fsGroup, or defaultMode)")
                    if binary == "zeroshard-server" and name in SERVER_SECRET_FLAGS and \
                            not secret_mode_ok(f[2], f[0], uid):
                        err(w, f"--{name}={value}: mounted mode {f[2]:04o} owned by {f[0]}, "
                               f"which zeroshard-server refuses as too open")
                cm = by_kind.get("ConfigMap", {}).get(vol.get("configMap", {}).get("name"))
                if cm is not None:
                    if not any(fnmatch.fnmatch(k, rel) for k in cm.get("data", {})):
                        err(w, f"--{name}={value}: ConfigMap {cm['metadata']['name']} has no {rel}")
            # Ports and probes.
            ports = container_ports(c)
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                p = c.get(probe)
                if not p:
                    continue
                for handler in ("grpc", "httpGet", "tcpSocket"):
                    if handler in p and resolve_port(c, p[handler]["port"]) is None:
                        err(w, f"{probe} port {p[handler]['port']} is not a container port")
                if "grpc" in p and "health_port" in flags and \
                        p["grpc"]["port"] != int(flags["health_port"]):
                    err(w, f"{probe} uses port {p['grpc']['port']}, --health_port is {flags['health_port']}")
            for flag, port_name in (("port", "grpc"), ("health_port", "health"),
                                    ("metrics_port", "metrics")):
                if flags.get(flag) is not None and ports.get(int(flags[flag])) != port_name:
                    err(w, f"--{flag}={flags[flag]} is not the container port named {port_name}")
            ann = w["spec"]["template"]["metadata"].get("annotations", {})
            if "prometheus.io/port" in ann and ports.get(int(ann["prometheus.io/port"])) != "metrics":
                err(w, f"prometheus.io/port {ann['prometheus.io/port']} is not the metrics port")
            if binary == "zeroshard-server" and flags.get("metrics_port") is None:
                err(w, "server without --metrics_port")

    # Services select pods and target their ports.
    for s in by_kind.get("Service", {}).values():
        sel = s["spec"].get("selector", {})
        pods = [w for w in workloads if matches(sel, pod_labels(w))]
        if not pods:
            err(s, f"selector {sel} matches no pod template")
        for p in s["spec"].get("ports", []):
            target = p.get("targetPort", p["port"])
            for w in pods:
                if all(resolve_port(c, target) is None for c in pod_spec(w)["containers"]):
                    err(s, f"targetPort {target} is not a port of {w['kind']}/{w['metadata']['name']}")

    # PodMonitors: pods to scrape, their metrics port, the NetworkPolicy.
    for pm in by_kind.get("PodMonitor", {}).values():
        sel = pm["spec"].get("selector", {}).get("matchLabels")
        pods = [w for w in workloads if matches(sel, pod_labels(w))]
        if not pods:
            err(pm, f"selector {sel} matches no pod template")
        for w in pods:
            ann = w["spec"]["template"]["metadata"].get("annotations", {})
            for label in pm["spec"].get("podTargetLabels", []):
                if label not in pod_labels(w):
                    err(pm, f"podTargetLabels {label}: {w['kind']}/{w['metadata']['name']} has no such label")
            for ep in pm["spec"].get("podMetricsEndpoints", []):
                port = next((n for c in pod_spec(w)["containers"]
                             for n, name in container_ports(c).items() if name == ep.get("port")), None)
                if port is None:
                    err(pm, f"port {ep.get('port')} is not a named port of {w['kind']}/{w['metadata']['name']}")
                    continue
                if "prometheus.io/path" in ann and ep.get("path", "/metrics") != ann["prometheus.io/path"]:
                    err(pm, f"path {ep.get('path')}, the pods serve {ann['prometheus.io/path']}")
                for pol in by_kind.get("NetworkPolicy", {}).values():
                    if not matches(pol["spec"]["podSelector"].get("matchLabels"), pod_labels(w)):
                        continue
                    if not any(any(p.get("port") in (port, ep["port"]) for p in r.get("ports", []))
                               and any(f.get("podSelector", {}).get("matchLabels") == PROMETHEUS_POD
                                       and "namespaceSelector" in f for f in r.get("from", []))
                               for r in pol["spec"].get("ingress", [])):
                        err(pol, f"does not admit the Prometheus Operator's pods {PROMETHEUS_POD} "
                                 f"(any namespace) on port {port} of {w['kind']}/{w['metadata']['name']}")

    # Topology: shard servers, their clients, the workers' rendezvous.
    servers = [w for w in workloads if
               os.path.basename(pod_spec(w)["containers"][0]["command"][0]) == "zeroshard-server"]
    for sts in servers:
        name, k = sts["metadata"]["name"], sts["spec"]["replicas"]
        svc = by_kind.get("Service", {}).get(sts["spec"]["serviceName"])
        if svc is None or svc["spec"].get("clusterIP") != "None":
            err(sts, f"serviceName {sts['spec']['serviceName']} is not a headless Service")
        c = pod_spec(sts)["containers"][0]
        flags = dict(flag_items(c.get("args")))
        if int(flags.get("num_shards", 1)) != k:
            err(sts, f"--num_shards={flags.get('num_shards')} but replicas: {k}")
        if "shard_index_from_hostname" not in flags:
            err(sts, "no --shard_index_from_hostname: every pod would be shard 0")
        want = ",".join(f"{name}-{i}.{sts['spec']['serviceName']}:{flags.get('port')}"
                        for i in range(k))
        for w in workloads:
            for wc in pod_spec(w)["containers"]:
                wf = dict(flag_items(wc.get("args")))
                if "servers" in wf and wf["servers"] != want:
                    err(w, f"--servers={wf['servers']}, want {want}")
                if "servers" in wf and ("tls_cert" in flags) != ("tls_ca" in wf):
                    err(w, "servers and workers disagree on TLS (--tls_cert vs --tls_ca)")
        for cm in by_kind.get("ConfigMap", {}).values():
            for key, text in cm.get("data", {}).items():
                if key.endswith(".json"):
                    n = json.loads(text).get("zeroshard", {}).get("servers")
                    if isinstance(n, int) and n != k:
                        err(cm, f"{key}: zeroshard.servers = {n}, {k} server replicas")
        for pol in by_kind.get("NetworkPolicy", {}).values():
            if not matches(pol["spec"]["podSelector"].get("matchLabels"), pod_labels(sts)):
                continue
            grpc_rules = [r for r in pol["spec"].get("ingress", [])
                          if any(p.get("port") == int(flags["port"]) for p in r.get("ports", []))]
            workers = [w for w in workloads if w not in servers]
            for w in workers:
                if not any(matches(f.get("podSelector", {}).get("matchLabels"), pod_labels(w))
                           and "namespaceSelector" not in f
                           for r in grpc_rules for f in r.get("from", [])):
                    err(pol, f"the gRPC port is not open to {w['kind']}/{w['metadata']['name']}")
    for w in workloads:
        if w in servers:
            continue
        c = pod_spec(w)["containers"][0]
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        wf = dict(flag_items(c.get("args")))
        if "elastic" in wf:
            check_elastic(w, c, wf, env, servers, by_kind, err)
            continue
        if w["kind"] == "Job":
            world = {w["spec"].get("completions"), w["spec"].get("parallelism")}
            host = f"{w['metadata']['name']}-0.{pod_spec(w).get('subdomain')}"
            check_job(w, c, err)
            if int(wf.get("checkpoint_interval") or -1) <= 0:
                err(w, "no --checkpoint_interval: a server that restarts loses the run, and "
                       "the Job applied again is refused by servers holding the job")
        else:
            world = {w["spec"].get("replicas")}
            host = f"{w['metadata']['name']}-0.{w['spec'].get('serviceName')}"
        world.add(int(env.get("ZEROSHARD_WORLD_SIZE") or 0))
        if len(world) != 1:
            err(w, f"world size disagrees (completions, parallelism/replicas, ZEROSHARD_WORLD_SIZE): {world}")
        coord = env.get("ZEROSHARD_COORD") or ""
        coord_host = coord.rsplit(":", 1)[0]
        if not (coord_host == host or coord_host.startswith(host + ".")):
            err(w, f"ZEROSHARD_COORD={coord} does not name rank 0 ({host}...)")
        elif coord_host.rstrip(".").endswith(".cluster.local"):
            err(w, f"ZEROSHARD_COORD={coord} assumes the cluster domain cluster.local "
                   f"(use {host}: the pod's DNS search path completes it)")
        elif container_ports(c).get(int(coord.rsplit(":", 1)[1])) != "coord":
            err(w, f"ZEROSHARD_COORD port is not the container port named coord")


def check_job(w, c, err):
    """A fixed-size Job: a wall-clock bound, and a podFailurePolicy that
    ends the run at the first failed rank (restartPolicy Never, which the
    policy needs) and names this container."""
    spec = w["spec"]
    if not spec.get("activeDeadlineSeconds"):
        err(w, "no activeDeadlineSeconds: a hung run holds its nodes forever")
    if pod_spec(w).get("restartPolicy") != "Never":
        err(w, "restartPolicy is not Never (a rank restarted in place cannot rejoin its group)")
    rules = spec.get("podFailurePolicy", {}).get("rules", [])
    fails = [r for r in rules if r.get("action") == "FailJob"]
    if not any(r.get("onExitCodes", {}).get("containerName") in (None, c["name"]) and
               r["onExitCodes"].get("operator") == "NotIn" and r["onExitCodes"].get("values") == [0]
               for r in fails if "onExitCodes" in r):
        err(w, f"no podFailurePolicy rule failing the Job when container {c['name']} exits non-zero")
    for r in rules:
        name = r.get("onExitCodes", {}).get("containerName")
        if name and name not in {x["name"] for x in pod_spec(w)["containers"]}:
            err(w, f"podFailurePolicy names container {name}, which the pod does not have")


def check_elastic(w, c, flags, env, servers, by_kind, err):
    """An --elastic worker: no launcher environment, the first group's size
    = the initial replicas, checkpoints on, workers reach each other on any
    port."""
    for name in ("ZEROSHARD_RANK", "ZEROSHARD_WORLD_SIZE", "ZEROSHARD_COORD"):
        if name in env:
            err(w, f"--elastic with {name} in the environment (the membership assigns it)")
    if w["kind"] != "Job":
        err(w, f"--elastic workers in a {w['kind']}, which restarts them after the last "
               f"step: use an elastic Indexed Job (their indexes complete)")
    else:
        if w["spec"].get("completionMode") != "Indexed":
            err(w, "--elastic Job is not Indexed (scaling changes completions and parallelism)")
        if w["spec"].get("completions") != w["spec"].get("parallelism"):
            err(w, f"completions {w['spec'].get('completions')} != parallelism "
                   f"{w['spec'].get('parallelism')} (an elastic Indexed Job keeps them equal)")
    count = w["spec"].get("replicas" if w["kind"] != "Job" else "parallelism", 1)
    start = int(flags.get("start_workers") or 0) or int(flags.get("min_workers") or 1)
    if start != count:
        err(w, f"--start_workers={flags.get('start_workers')} but {count} initial workers")
    if int(flags.get("min_workers") or 1) > start:
        err(w, f"--min_workers={flags.get('min_workers')} above --start_workers")
    if not flags.get("data"):
        err(w, "--elastic without --data: trains on synthetic tokens")
    if int(flags.get("checkpoint_interval") or -1) <= 0:
        err(w, "--elastic needs --checkpoint_interval > 0")
    # Unique among running pods: the pod name, or an Indexed Job's index.
    name = flags.get("worker_name") or ""
    refs = {e["name"]: e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            for e in c.get("env", [])}
    used = {refs.get(v) for v in re.findall(r"\$\((\w+)\)", name)}
    index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    if not (re.fullmatch(r"\$\((\w+)\)", name) and used == {"metadata.name"}) and \
            not (w["kind"] == "Job" and w["spec"].get("completionMode") == "Indexed"
                 and index in used):
        err(w, f"--worker_name={name} is neither the pod name (metadata.name) nor "
               f"made of the Job's completion index")
    for sts in servers:
        sf = dict(flag_items(pod_spec(sts)["containers"][0].get("args")))
        if not sf.get("checkpoint_dir"):
            err(sts, f"no --checkpoint_dir, which {w['kind']}/{w['metadata']['name']} (--elastic) needs")
    # UCX between the workers picks its ports: a rule admitting the
    # workers' own pods on every port.
    labels = pod_labels(w)
    for pol in by_kind.get("NetworkPolicy", {}).values():
        if not matches(pol["spec"]["podSelector"].get("matchLabels"), labels):
            continue
        if not any(not r.get("ports") and any(
                matches(f.get("podSelector", {}).get("matchLabels"), labels)
                and "namespaceSelector" not in f for f in r.get("from", []))
                   for r in pol["spec"].get("ingress", [])):
            err(pol, f"does not admit {w['kind']}/{w['metadata']['name']} from its own pods on every port")


# PodMonitor (monitoring.coreos.com/v1, a CRD the API schema does not
# have): the fields these manifests may use, checked strictly here.
POD_MONITOR_SPEC = {"selector", "podMetricsEndpoints", "podTargetLabels", "jobLabel",
                    "namespaceSelector", "sampleLimit", "targetLimit"}
POD_MONITOR_ENDPOINT = {"port", "portNumber", "path", "interval", "scrapeTimeout",
                        "scheme", "honorLabels", "honorTimestamps", "relabelings",
                        "metricRelabelings", "params", "filterRunning"}


def validate_pod_monitor(o):
    """Problems of a PodMonitor's shape, as the operator's CRD would see them."""
    spec = o.get("spec", {})
    out = [f"spec: unknown field {k}" for k in sorted(set(spec) - POD_MONITOR_SPEC)]
    if not spec.get("selector", {}).get("matchLabels"):
        out.append("spec.selector.matchLabels is required here")
    eps = spec.get("podMetricsEndpoints") or []
    if not eps:
        out.append("spec.podMetricsEndpoints is empty")
    for i, ep in enumerate(eps):
        out += [f"spec.podMetricsEndpoints.{i}: unknown field {k}"
                for k in sorted(set(ep) - POD_MONITOR_ENDPOINT)]
        if not isinstance(ep.get("port"), str):
            out.append(f"spec.podMetricsEndpoints.{i}.port must name a container port")
    return out


def validate(objs, errors):
    # One namespace for every namespaced object, or none for all: an object
    # without one lands in kubectl's current namespace, away from the rest.
    spaces = {o["metadata"].get("namespace") for o in objs if o["kind"] != "Namespace"}
    if len(spaces) > 1:
        for o in objs:
            if o["kind"] != "Namespace" and o["metadata"].get("namespace") is None:
                errors.append(f"{o['kind']}/{o['metadata']['name']}: no namespace, while the "
                              f"others are in {sorted(s for s in spaces if s)}")
    for o in objs:
        if o.get("apiVersion") == "monitoring.coreos.com/v1":
            if o["kind"] != "PodMonitor":
                errors.append(f"{o['kind']}/{o['metadata']['name']}: not a PodMonitor")
                continue
            errors += [f"PodMonitor/{o['metadata']['name']}: schema: {e}"
                       for e in validate_pod_monitor(o)]
            continue
        try:
            kubernetes_validate.validate(o, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{o['kind']}/{o['metadata']['name']}: schema: "
                          f"{'.'.join(map(str, e.path))}: {e.message}")


def self_test(objs, helps, external, elastic=False):
    """Each mutation of a good rendering must be reported (elastic: the
    --elastic worker mutations, on overlays/elastic)."""
    def sts(o):
        return o["kind"] == "StatefulSet" and o["metadata"]["name"] == "zeroshard-server"

    def server_args(o):
        return pod_spec(o)["containers"][0]["args"]

    def worker(o):
        return o["kind"] == "Job" and o["metadata"]["name"] == "zeroshard-train"

    def as_statefulset(os_):  # the elastic overlay before issue 25
        w = next(filter(worker, os_))
        w.update(apiVersion="apps/v1", kind="StatefulSet")
        spec = w["spec"]
        w["spec"] = {"serviceName": "zeroshard-workers", "replicas": spec["parallelism"],
                     "selector": {"matchLabels": {"app.kubernetes.io/name": "zeroshard-worker"}},
                     "template": spec["template"]}
        w["spec"]["template"]["spec"]["restartPolicy"] = "Always"

    def drop_flag(o, name):
        c = pod_spec(o)["containers"][0]
        c["args"] = [a for a in c["args"] if not a.startswith(f"--{name}")]

    def close_worker_ports(os_):
        for o in os_:
            if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "zeroshard-workers":
                for r in o["spec"]["ingress"]:
                    r["ports"] = [{"port": 9090, "protocol": "TCP"}]

    elastic_mutations = {
        "elastic: parallelism != --start_workers":
            lambda os_: next(filter(worker, os_))["spec"].update(parallelism=3, completions=3),
        "elastic: image not rewritten": lambda os_: pod_spec(next(filter(worker, os_)))
        ["containers"][0].update(image="zeroshard-worker"),
        "elastic: completions != parallelism":
            lambda os_: next(filter(worker, os_))["spec"].update(completions=3),
        "elastic: old shape (a StatefulSet restarts finished workers)": as_statefulset,
        "elastic: rank env": lambda os_: pod_spec(next(filter(worker, os_)))
        ["containers"][0]["env"].append({"name": "ZEROSHARD_WORLD_SIZE", "value": "2"}),
        "elastic: old shape (synthetic tokens)": lambda os_: drop_flag(
            next(filter(worker, os_)), "data"),
        "elastic: no checkpoints": lambda os_: drop_flag(next(filter(worker, os_)),
                                                         "checkpoint_interval"),
        "elastic: no --checkpoint_dir": lambda os_: drop_flag(next(filter(sts, os_)),
                                                              "checkpoint_dir"),
        "elastic: worker ports closed": close_worker_ports,
    }
    def job(o):
        return o["kind"] == "Job" and o["metadata"]["name"] == "zeroshard-train"

    def volume(o, name):
        return next(v for v in pod_spec(o)["volumes"] if v["name"] == name)

    # overlays/tls: the Secrets' files as the kubelet mounts them.
    tls_mutations = {
        # The shape before issue 25: worker pods with runAsUser/runAsGroup
        # 65532 and no fsGroup read 0440 root:root files.
        "tls: old shape (workers without fsGroup)":
            lambda os_: pod_spec(next(filter(job, os_)))["securityContext"].pop("fsGroup", None),
        "tls: worker runs as another group, no fsGroup": lambda os_: (
            pod_spec(next(filter(job, os_)))["securityContext"].pop("fsGroup", None),
            pod_spec(next(filter(job, os_)))["securityContext"].update(runAsGroup=1000)),
        "tls: ca.crt not among the items": lambda os_: volume(next(filter(job, os_)), "tls")
        ["secret"]["items"][0].update(path="ca.pem"),
        "tls: server token world-readable": lambda os_: volume(next(filter(sts, os_)), "tokens")
        ["secret"].update(defaultMode=0o444),
    }
    def monitor(o, name="zeroshard-worker"):
        return o["kind"] == "PodMonitor" and o["metadata"]["name"] == name

    def drop_scrape_rule(os_):
        for o in os_:
            if o["kind"] == "NetworkPolicy" and o["metadata"]["name"] == "zeroshard-server":
                o["spec"]["ingress"] = [r for r in o["spec"]["ingress"] if not any(
                    f.get("podSelector", {}).get("matchLabels") == PROMETHEUS_POD
                    for f in r.get("from", []))]

    # overlays/monitoring: the PodMonitors and the NetworkPolicy for them.
    monitoring_mutations = {
        "monitoring: port name": lambda os_: next(filter(monitor, os_))["spec"]
        ["podMetricsEndpoints"][0].update(port="http-metrics"),
        "monitoring: selector": lambda os_: next(filter(monitor, os_))["spec"]["selector"]
        ["matchLabels"].update({"app.kubernetes.io/name": "worker"}),
        "monitoring: NetworkPolicy closed to Prometheus": drop_scrape_rule,
        "monitoring: unknown field": lambda os_: next(filter(monitor, os_))["spec"]
        ["podMetricsEndpoints"][0].update(intervall="15s"),
        "monitoring: path": lambda os_: next(filter(monitor, os_))["spec"]
        ["podMetricsEndpoints"][0].update(path="/metric"),
        "monitoring: no namespace": lambda os_: next(filter(monitor, os_))["metadata"]
        .pop("namespace", None),
    }
    mutations = tls_mutations if elastic == "tls" else monitoring_mutations \
        if elastic == "monitoring" else elastic_mutations if elastic else {
        "unknown flag": lambda os_: server_args(next(filter(sts, os_))).append("--no_such_flag=1"),
        "probe port": lambda os_: pod_spec(next(filter(sts, os_)))["containers"][0]
        ["readinessProbe"]["grpc"].update(port=7999),
        "replicas": lambda os_: next(filter(sts, os_))["spec"].update(replicas=3),
        "missing ConfigMap": lambda os_: [o for o in os_ if o["kind"] != "ConfigMap"],
        "schema": lambda os_: next(filter(sts, os_))["spec"].update(replicas="two"),
        "unknown field": lambda os_: next(filter(sts, os_))["spec"].update(replica=2),
        "old shape: ZEROSHARD_COORD assumes cluster.local": lambda os_: next(
            e for e in pod_spec(next(filter(job, os_)))["containers"][0]["env"]
            if e["name"] == "ZEROSHARD_COORD").update(
            value="zeroshard-train-0.zeroshard-workers.zeroshard-dev.svc.cluster.local:29500"),
        "old shape: Job without podFailurePolicy": lambda os_: next(filter(job, os_))
        ["spec"].pop("podFailurePolicy"),
        "old shape: Job without activeDeadlineSeconds": lambda os_: next(filter(job, os_))
        ["spec"].pop("activeDeadlineSeconds"),
        "podFailurePolicy names another container": lambda os_: next(filter(job, os_))
        ["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"].update(containerName="trainer"),
        "old shape: Job without checkpoints": lambda os_: drop_flag(next(filter(job, os_)),
                                                                   "checkpoint_interval"),
    }
    baseline = []
    validate(objs, baseline)
    check(copy.deepcopy(objs), helps, external, baseline)
    failures = []
    for what, mutate in mutations.items():
        broken = copy.deepcopy(objs)
        result = mutate(broken)
        if isinstance(result, list):
            broken = result
        errors = []
        validate(broken, errors)
        try:
            check(broken, helps, external, errors)
        except Exception as e:  # a crash counts as reported
            errors.append(repr(e))
        errors = [e for e in errors if e not in baseline]  # new problems only
        print(f"  self-test '{what}': {errors[0] if errors else 'NOT REPORTED'}")
        if not errors:
            failures.append(what)
    return failures


def self_test_modes():
    """The file-mode model against cases worked out from the kubelet's
    rules; returns the cases it gets wrong."""
    secret = {"secret": {"secretName": "s", "defaultMode": 0o440}}
    cases = [
        # volume, file, fsGroup, (uid, groups, caps dropped), readable
        (secret, "ca.crt", None, (65532, {65532}, True), False),  # issue 25
        (secret, "ca.crt", 65532, (65532, {65532}, True), True),
        (secret, "ca.crt", 2000, (65532, {65532, 2000}, True), True),
        (secret, "ca.crt", None, (0, {0}, False), True),
        (secret, "ca.crt", None, (0, {0}, True), True),  # root owns it: 0400
        ({"secret": {"secretName": "s"}}, "ca.crt", None, (65532, {65532}, True), True),
        ({"secret": {"secretName": "s", "defaultMode": 0o400}}, "ca.crt", None,
         (65532, {65532}, True), False),
        ({"secret": {"secretName": "s", "defaultMode": 0o400}}, "ca.crt", 65532,
         (65532, {65532}, True), True),  # fsGroup adds 0440
        ({"secret": {"secretName": "s", "defaultMode": 0o644,
                     "items": [{"key": "k", "path": "ca.crt", "mode": 0o600}]}},
         "ca.crt", None, (65532, {65532}, True), False),
        ({"projected": {"defaultMode": 0o440, "sources": [{"secret": {"name": "s"}}]}},
         "token", None, (65532, {65532}, True), False),
        ({"configMap": {"name": "c"}}, "ds_config.json", None, (65532, {65532}, True), True),
    ]
    wrong = []
    for vol, rel, fs, (uid, groups, dropped), want in cases:
        if can_read(uid, groups, dropped, mounted_file(vol, rel, fs)) != want:
            wrong.append(f"{vol} {rel} fsGroup={fs} uid={uid}: want readable={want}")
    if mounted_file(secret | {"secret": {"secretName": "s", "items": [
            {"key": "k", "path": "a"}]}}, "b", None) is not None:
        wrong.append("an item list without the file must give None")
    if secret_mode_ok(0o440, 0, 0) or not secret_mode_ok(0o440, 0, 65532) or \
            secret_mode_ok(0o444, 0, 65532) or not secret_mode_ok(0o600, 65532, 65532):
        wrong.append("secret_mode_ok disagrees with CheckSecretFileMode")
    print(f"  self-test file modes: {len(cases) - len(wrong)} of {len(cases)} cases as the kubelet")
    return wrong


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deploy", required=True)
    ap.add_argument("--kubectl", default="kubectl")
    ap.add_argument("--binary", action="append", default=[])
    ap.add_argument("--self_test", action="store_true")
    a = ap.parse_args()
    helps = {}
    for b in a.binary:
        name, path = b.split("=", 1)
        helps[name] = help_flags(path)
    external = set()
    readme = open(os.path.join(a.deploy, "README.md")).read()
    for line in open(os.path.join(a.deploy, "EXTERNAL")):
        line = line.split("#")[0].split()
        if line:
            external.add((line[0], line[1]))
            if line[1] not in readme:
                print(f"deploy/EXTERNAL: {line[1]} is not documented in deploy/README.md")
                return 1
    overlays = sorted(os.listdir(os.path.join(a.deploy, "overlays")))
    all_errors = self_test_modes() if a.self_test else []
    for overlay in overlays:
        objs = render(a.kubectl, os.path.join(a.deploy, "overlays", overlay))
        errors = []
        validate(objs, errors)
        check(objs, helps, external, errors)
        kinds = sorted({o["kind"] for o in objs})
        print(f"{overlay}: {len(objs)} objects valid against Kubernetes {K8S_VERSION} "
              f"({', '.join(kinds)}); {len(errors)} problems")
        all_errors += [f"{overlay}: {e}" for e in errors]
        if a.self_test and overlay in ("dev", "elastic", "tls", "monitoring"):
            failed = self_test(objs, helps, external, elastic={
                "dev": False, "elastic": True, "tls": "tls", "monitoring": "monitoring"}[overlay])
            all_errors += [f"self-test: '{f}' not reported" for f in failed]
    for e in all_errors:
        print(e)
    return 1 if all_errors else 0


if __name__ == "__main__":
    sys.exit(main())
