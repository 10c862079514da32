"""Runs a whole job from deploy/overlays/dev as podman containers — the
shard servers and the worker ranks, with the images, commands, arguments,
environment, users and mounts the rendered manifests give — and then the
same job with the same binaries directly on the host, and compares the two
(tests/container_job_test.sh, which sets up podman; issue 25).

What stands in for Kubernetes:
  - a podman bridge network with a fixed address per pod, the pods'
    hostnames (zeroshard-server-k: --shard_index_from_hostname) and the
    headless Services' DNS names as /etc/hosts entries (--add-host);
  - the ConfigMap's files in a directory mounted read-only where the pod
    mounts the ConfigMap; a host directory per server for its volume
    (volumeClaimTemplates) and per worker for /tmp (emptyDir), owned by
    the pod's user; a read-only root file system; every capability dropped;
  - env: fieldRef metadata.namespace, metadata.name and the Job's
    completion index, then $(VAR) expansion as the kubelet does.
Two changes to the manifests' arguments, both printed: --steps=N (the
overlay trains 1000 steps) and --save=/tmp/model.bin on the workers (to
compare the trained model). The direct run uses loopback ports instead of
the fixed ports and names, and --shard_index instead of the hostname.

Passes when every container exits 0 and the direct run prints the same
loss at every step and saves a bit-identical model.

Usage: container_job.py --deploy DIR --kubectl PATH --bin DIR --work DIR
           [--overlay dev] [--steps N] [--data TOKENS.bin] [--subnet 10.89.N]
"""

import argparse
import atexit
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

ULIMITS = ["--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_check import mounted_file  # noqa: E402  the kubelet's file modes
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from zeroshard._ports import quiet_port  # noqa: E402  the direct run's ZEROSHARD_COORD


def make_secrets(d, server_names, job_id):
    """The Secrets of deploy/EXTERNAL, as their keys' bytes: a throw-away CA,
    a server certificate naming every server address the workers dial (as
    deploy/README.md asks; gRPC refuses a wildcard over one label such as
    *.zeroshard-server) and 127.0.0.1 (the direct run), the servers' tokens
    file and the workers' token."""
    os.makedirs(d)

    def ssl(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)
    ssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=test CA")
    ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "tls.key", "-out", "tls.csr", "-subj", f"/CN={server_names[0]}")
    with open(os.path.join(d, "ext"), "w") as f:
        f.write("subjectAltName=" + ",".join(f"DNS:{n}" for n in server_names) +
                ",IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    ssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-sha256", "-extfile", "ext", "-out", "tls.crt")
    read = lambda n: open(os.path.join(d, n), "rb").read()  # noqa: E731
    worker, admin = os.urandom(16).hex(), os.urandom(16).hex()
    # The workers' token is an admin of the job: rank 0 checkpoints
    # (--checkpoint_interval), and recovery reads stats and restores.
    tokens = f"{worker} {job_id} admin workers\n{admin} {job_id} admin admin\n"
    return {"zeroshard-tls": {k: read(k) for k in ("tls.crt", "tls.key", "ca.crt")},
            "zeroshard-tokens": {"tokens": tokens.encode()},
            "zeroshard-worker-token": {"token": worker.encode()}}


def log(msg):
    print(f"container_job: {msg}", flush=True)


def render(kubectl, path):
    import yaml
    out = subprocess.run([kubectl, "kustomize", path], check=True,
                         capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def expand(value, env):
    """$(VAR) as the kubelet expands it in env values and args."""
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), value)


def pod_env(obj, c, pod_name, index):
    env = {}
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)
            continue
        path = e["valueFrom"]["fieldRef"]["fieldPath"]
        env[e["name"]] = {
            "metadata.namespace": obj["metadata"]["namespace"],
            "metadata.name": pod_name,
            "metadata.annotations['batch.kubernetes.io/job-completion-index']": str(index),
        }[path]
    return env


def set_flag(args, name, value):
    """Replaces --name=... (or appends it)."""
    out = [a for a in args if not a.startswith(f"--{name}=")]
    return out + [f"--{name}={value}"]


def flag(args, name):
    return next((a.split("=", 1)[1] for a in args if a.startswith(f"--{name}=")), None)


def user(spec, c):
    psc, csc = spec.get("securityContext", {}), c.get("securityContext", {})
    return (csc.get("runAsUser", psc.get("runAsUser", 65532)),
            csc.get("runAsGroup", psc.get("runAsGroup", 65532)))


def podman(*args, check=True):
    r = subprocess.run(["podman", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"podman {args[0]} failed (exit {r.returncode}): {r.stderr.strip()}")
    return r


def wait_port(host, port, what, proc_alive, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            if not proc_alive():
                raise RuntimeError(f"{what} exited before listening on {host}:{port}")
            time.sleep(0.2)
    raise RuntimeError(f"{what}: nothing listens on {host}:{port} after {timeout}s")


def losses(text):
    """'step i/N loss X' of every step, without the timing columns."""
    return re.findall(r"^(step \d+/\d+ loss \S+)", text, re.M)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deploy", required=True)
    ap.add_argument("--kubectl", default="kubectl")
    ap.add_argument("--bin", required=True, help="bazel-bin with the binaries the images hold")
    ap.add_argument("--work", required=True)
    ap.add_argument("--overlay", default="dev")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--data", help="llm.c token file for a PersistentVolumeClaim of token shards")
    ap.add_argument("--old_shape", action="store_true",
                    help="the workers without fsGroup (before issue 25): require that they "
                         "cannot read their Secrets' files")
    ap.add_argument("--subnet", help="10.89.N (default: the first free of 10.89.100-199)")
    a = ap.parse_args()

    objs = render(a.kubectl, os.path.join(a.deploy, "overlays", a.overlay))
    sts = next(o for o in objs if o["kind"] == "StatefulSet"
               and o["metadata"]["name"] == "zeroshard-server")
    job = next(o for o in objs if o["kind"] == "Job")
    cms = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}
    sspec, wspec = sts["spec"]["template"]["spec"], job["spec"]["template"]["spec"]
    sc, wc = sspec["containers"][0], wspec["containers"][0]
    nservers, nworkers = sts["spec"]["replicas"], job["spec"]["completions"]
    svc, sub = sts["spec"]["serviceName"], wspec.get("subdomain")
    ns = job["metadata"]["namespace"]
    if a.old_shape:
        wspec["securityContext"].pop("fsGroup", None)
    log(f"overlay {a.overlay}{' (old shape: workers without fsGroup)' if a.old_shape else ''}: {nservers} servers ({sc['image']}), {nworkers} workers "
        f"({wc['image']}), {a.steps} steps")

    # A network of its own, on a subnet no other network (or test) holds.
    net = f"zs-ctest-{os.getpid()}"
    start = os.getpid() % 100
    for n in ([a.subnet] if a.subnet else [f"10.89.{100 + (start + i) % 100}" for i in range(100)]):
        if podman("network", "create", "--subnet", f"{n}.0/24", net, check=False).returncode == 0:
            a.subnet = n
            atexit.register(podman, "network", "rm", "-f", net, check=False)
            break
    else:
        raise RuntimeError("podman network create failed on every subnet 10.89.100-199.0/24")

    # Pods: name, address, hostname aliases (the headless Services' names).
    servers = [(f"{sts['metadata']['name']}-{k}", f"{a.subnet}.{10 + k}") for k in range(nservers)]
    workers = [(f"{job['metadata']['name']}-{i}", f"{a.subnet}.{50 + i}") for i in range(nworkers)]
    hosts = []
    for name, ip in servers:
        hosts += ["--add-host", f"{name}.{svc}:{ip}"]
    for name, ip in workers if sub else []:
        hosts += ["--add-host", f"{name}.{sub}:{ip}"]

    # The pods' volumes as host directories: the ConfigMap's files, the
    # token shards for a PersistentVolumeClaim (zeroshard-data), the
    # Secrets' files per pod with the owner, group and mode the kubelet
    # gives them, a directory per pod for an emptyDir or a claim template.
    secrets = None
    if any("secret" in v for v in sspec.get("volumes", []) + wspec["volumes"]):
        secrets = make_secrets(os.path.join(a.work, "secrets"),
                               [f"{name}.{svc}" for name, _ in servers], flag(wc["args"], "job_id"))
    shared = {}  # volume name -> host directory (same for every pod)
    for v in wspec["volumes"]:
        d = os.path.join(a.work, "volume-" + v["name"])
        if "configMap" in v:
            os.makedirs(d)
            for key, text in cms[v["configMap"]["name"]]["data"].items():
                with open(os.path.join(d, key), "w") as f:
                    f.write(text)
            shared[v["name"]] = d
        elif "persistentVolumeClaim" in v:
            if not a.data:
                raise RuntimeError(f"the workers mount PersistentVolumeClaim "
                                   f"{v['persistentVolumeClaim']['claimName']}: give --data")
            os.makedirs(d)
            shutil.copy(a.data, os.path.join(d, "train_000.bin"))
            os.chmod(os.path.join(d, "train_000.bin"), 0o644)  # the volume's files
            shared[v["name"]] = d
    tmp_mount = next(m for m in wc["volumeMounts"] if m["mountPath"] == "/tmp")["mountPath"]

    def pod_mounts(spec, c, pod_dir, direct=False):
        """(container path, host path, read-only) of a container's mounts,
        creating the pod's own directories (direct: the run without
        containers, as root: Secrets' files 0600, as the server's own
        check wants them for root)."""
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        uid, gid = user(spec, c)
        out = []
        for m in c["volumeMounts"]:
            v = vols.get(m["name"], {})
            host = shared.get(m["name"])
            if host is None:
                host = os.path.join(pod_dir, m["name"])
                os.makedirs(host)
                if "secret" in v:
                    files = secrets[v["secret"]["secretName"]]
                    keys = {i["path"]: i["key"] for i in v["secret"].get("items", [])} or \
                        {k: k for k in files}
                    for rel, key in keys.items():
                        f = os.path.join(host, rel)
                        with open(f, "wb") as out_f:
                            out_f.write(files[key])
                        fuid, fgid, mode = (0, 0, 0o600) if direct else mounted_file(
                            v, rel, spec.get("securityContext", {}).get("fsGroup"))
                        os.chown(f, fuid, fgid)
                        os.chmod(f, mode)
                elif not direct:
                    os.chown(host, uid, gid)
            out.append((m["mountPath"], host, m.get("readOnly", False)))
        return out

    def on_host(value, mounts):
        """A flag's container path as its host path."""
        for path, host, _ in sorted(mounts, key=lambda m: -len(m[0])):
            if value == path or value.startswith(path.rstrip("/") + "/"):
                return host + value[len(path.rstrip("/")):]
        return value

    def to_host(args, mounts):
        """Every absolute path a flag names, as its host path."""
        out = []
        for x in args:
            name, _, value = x.partition("=")
            out.append(f"{name}={on_host(value, mounts)}" if value.startswith("/") else x)
        return out

    def sec(spec, c):
        """The pod's user, its groups (fsGroup, supplementalGroups: the
        kubelet adds them to the process), and the container's lockdown."""
        uid, gid = user(spec, c)
        psc = spec.get("securityContext", {})
        groups = [g for g in [psc.get("fsGroup"), *psc.get("supplementalGroups", [])]
                  if g is not None]
        return ["--user", f"{uid}:{gid}", *[x for g in groups for x in ("--group-add", str(g))],
                "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
                *ULIMITS]

    def volumes(mounts):
        return [x for path, host, ro in mounts for x in ("-v", f"{host}:{path}" + (":ro" if ro else ""))]

    def worker_args(args):
        return set_flag(set_flag(args, "steps", a.steps), "save", f"{tmp_mount}/model.bin")

    names = []
    t0 = time.monotonic()
    try:
        for k, (name, ip) in enumerate(servers):
            mounts = pod_mounts(sspec, sc, os.path.join(a.work, name))
            cmd = ["run", "-d", "--name", f"{net}-{name}", "--network", net, "--ip", ip,
                   "--hostname", name, *hosts, *sec(sspec, sc), *volumes(mounts),
                   sc["image"], *sc["command"], *sc["args"]]
            log("podman " + " ".join(cmd))
            podman(*cmd)
            names.append(f"{net}-{name}")
        health = int(flag(sc["args"], "health_port"))
        for k, (name, ip) in enumerate(servers):
            wait_port(ip, health, name, lambda n=f"{net}-{name}": podman(
                "container", "inspect", "-f", "{{.State.Running}}", n).stdout.strip() == "true")
        for i, (name, ip) in enumerate(workers):
            env = pod_env(job, wc, name, i)
            mounts = pod_mounts(wspec, wc, os.path.join(a.work, name))
            e = [x for k, v in env.items() for x in ("-e", f"{k}={v}")]
            args = [expand(x, env) for x in worker_args(wc["args"])]
            cmd = ["run", "-d", "--name", f"{net}-{name}", "--network", net, "--ip", ip,
                   "--hostname", name, *hosts, *sec(wspec, wc), *e, *volumes(mounts),
                   wc["image"], *wc["command"], *args]
            log("podman " + " ".join(cmd))
            podman(*cmd)
            names.append(f"{net}-{name}")
        codes = [int(podman("wait", f"{net}-{n}").stdout.strip() or -1) for n, _ in workers]
        wall = time.monotonic() - t0
        outs = {n: podman("logs", f"{net}-{n}").stdout + podman("logs", f"{net}-{n}").stderr
                for n, _ in servers + workers}
    finally:
        for n in names:
            podman("rm", "-f", "-t", "5", n, check=False)
        podman("network", "rm", "-f", net, check=False)
    # Rank 0 prints the steps and saves the model (elastic: the group's
    # rank 0, either pod).
    first = max((n for n, _ in workers), key=lambda n: len(losses(outs[n])))
    rank0 = outs[first]
    print(f"---- {first} (rank 0) in its container, last lines ----")
    print("\n".join(rank0.strip().splitlines()[-6:]))
    if a.old_shape:
        denied = [n for n, _ in workers if "Permission denied" in outs[n]]
        if all(codes) and len(denied) == len(workers):
            log(f"old shape: every worker exits non-zero (codes {codes}): Permission denied")
            return 0
        log(f"FAIL: old shape: worker exit codes {codes}, 'Permission denied' from {denied}")
        return 1
    if any(codes):
        for n, text in outs.items():
            print(f"---- {n} ----\n{text[-3000:]}")
        log(f"FAIL: worker exit codes {codes}")
        return 1
    log(f"containers: {nservers} servers + {nworkers} workers trained {a.steps} steps "
        f"in {wall:.1f} s")

    # The same job without containers: the same binaries and arguments on
    # loopback ports.
    direct = os.path.join(a.work, "direct")
    os.makedirs(direct)
    bins = {"zeroshard-server": os.path.join(a.bin, "server/zeroshard-server"),
            "zeroshard-worker": os.path.join(a.bin, "worker/train/zeroshard-worker")}
    procs = []
    ports = []
    try:
        for k, (name, _) in enumerate(servers):
            mounts = pod_mounts(sspec, sc, os.path.join(direct, name), direct=True)
            args = to_host([x for x in sc["args"] if x != "--shard_index_from_hostname"], mounts)
            for f, v in (("host", "127.0.0.1"), ("port", 0), ("health_port", -1),
                         ("metrics_port", -1), ("shard_index", k)):
                args = set_flag(args, f, v)
            out = open(os.path.join(direct, f"server{k}.log"), "w+")
            procs.append(subprocess.Popen(
                [bins[os.path.basename(sc["command"][0])], *args], stdout=out,
                stderr=subprocess.STDOUT))
            deadline = time.monotonic() + 120
            while True:  # the server prints the port it picked
                out.seek(0)
                m = re.search(r"listening on [^\s:]*:(\d+)", out.read())
                if m:
                    ports.append(int(m.group(1)))
                    break
                if procs[-1].poll() is not None or time.monotonic() > deadline:
                    out.seek(0)
                    raise RuntimeError(f"direct server {k} did not start:\n{out.read()}")
                time.sleep(0.1)
        coord_port = quiet_port()
        wprocs = []
        for i, (name, _) in enumerate(workers):
            env = pod_env(job, wc, name, i)
            if "ZEROSHARD_COORD" in env:
                env["ZEROSHARD_COORD"] = f"127.0.0.1:{coord_port}"
            mounts = pod_mounts(wspec, wc, os.path.join(direct, name), direct=True)
            args = to_host([expand(x, env) for x in worker_args(wc["args"])], mounts)
            args = set_flag(args, "servers", ",".join(f"127.0.0.1:{p}" for p in ports))
            args = set_flag(args, "metrics_port", 0)
            wprocs.append(subprocess.Popen(
                [bins[os.path.basename(wc["command"][0])], *args],
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env},
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=direct))
        direct_out = [p.communicate(timeout=600)[0] for p in wprocs]
        dfirst = max(range(len(workers)), key=lambda i: len(losses(direct_out[i])))
        direct_codes = [p.returncode for p in wprocs]
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    if any(direct_codes):
        print(direct_out[0][-3000:])
        log(f"FAIL: direct worker exit codes {direct_codes}")
        return 1

    got, want = losses(rank0), losses(direct_out[dfirst])
    tmp = next(m["name"] for m in wc["volumeMounts"] if m["mountPath"] == tmp_mount)
    model_c = open(os.path.join(a.work, first, tmp, "model.bin"), "rb").read()
    model_d = open(os.path.join(direct, workers[dfirst][0], tmp, "model.bin"), "rb").read()
    log(f"direct run: {len(want)} steps, final '{want[-1] if want else None}'")
    log(f"containers:  {len(got)} steps, final '{got[-1] if got else None}'")
    problems = []
    if len(got) != a.steps or got != want:
        diff = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), None)
        problems.append(f"losses differ (first at step index {diff}: {len(got)} vs {len(want)} lines)")
    if model_c != model_d:
        problems.append(f"saved models differ ({len(model_c)} vs {len(model_d)} bytes)")
    else:
        log(f"saved model: {len(model_c)} bytes, bit-identical")
    for p in problems:
        log("FAIL: " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
