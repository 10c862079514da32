"""One rank of a multi-process engine test, started with torchrun's
environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) by
torch_engine_test.py:

  torch_worker.py ddp OUT STEPS GAS CLIP LR WD
  torch_worker.py zeroshard OUT STEPS CONFIG_JSON SERVERS [MODEL]
  torch_worker.py exit OUT keep|replace
  torch_worker.py gathered OUT CONFIG_JSON SERVERS

ddp: torch DistributedDataParallel + torch.optim.AdamW (the reference);
zeroshard: zeroshard.initialize. Rank 0 saves the initial and final
parameters (and, for zeroshard, the stage 3 bytes held) to OUT.
gathered: one step, then zeroshard.GatheredParameters with
modifier_rank=1 (rank 1 fills mix.weight with 0.5), a read-only block,
and one more step; every rank saves what it saw in each block to
OUT.<rank>.
exit: the default process group zeroshard started, left alive (keep) or
replaced by the script's own (replace); every rank writes to OUT.<rank>
whether a process group was still alive when its last atexit handler
ran."""
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models as tm  # noqa: E402


def run_ddp(out, steps, gas, clip, lr, wd):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    net = tm.model()
    first = tm.snapshot(net)
    ddp = torch.nn.parallel.DistributedDataParallel(
        net, find_unused_parameters=True)
    opt = torch.optim.AdamW(tm.torch_groups(net, wd), lr=lr)
    for step in range(steps):
        opt.zero_grad(set_to_none=False)
        for micro in range(gas):
            x, y = tm.batch(step, micro, rank)
            if micro < gas - 1:
                with ddp.no_sync():
                    (tm.loss_of(ddp, x, y, step) / gas).backward()
            else:
                (tm.loss_of(ddp, x, y, step) / gas).backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(net.parameters(), clip)
        opt.step()
    if rank == 0:
        torch.save({"first": first, "last": tm.snapshot(net)}, out)
    dist.destroy_process_group()


def run_exit(out, mode):
    from zeroshard import dist as zdist

    tm.report_group_at_exit(f"{out}.{os.environ['RANK']}")
    rank, world, _, _ = zdist.init_distributed()
    assert world == 2 and dist.is_initialized(), (rank, world)
    dist.barrier()
    if mode == "replace":
        dist.destroy_process_group()
        dist.init_process_group("gloo", init_method=f"file://{out}.store",
                                rank=rank, world_size=world)
        dist.barrier()


def run_zeroshard(out, steps, config, servers, model_name="convnet"):
    import zeroshard
    net = tm.model(name=model_name)
    first = tm.snapshot(net)
    engine, _, _, _ = zeroshard.initialize(model=net, config=config,
                                           servers=servers,
                                           job_id="torch-worker")
    rank = engine.rank
    held = []
    if engine.stage == 3:
        for m in net.modules():
            m.register_forward_pre_hook(
                # From the second step: the first forward gathers every
                # unit once, to learn the order (stage3.py).
                lambda *_: held.append(engine._params.held_bytes())
                if engine.global_steps > 0 else None)
    loads = {}  # stage 3: unit loads started before each step
    while engine.global_steps < steps:
        step = engine.global_steps
        loads[step] = getattr(engine._params, "loads", 0)
        for micro in range(engine.gradient_accumulation_steps()):
            x, y = tm.batch(step, micro, rank)
            engine.backward(tm.loss_of(engine, x, y, step))
            engine.step()
    params = engine._params
    loads_end = getattr(params, "loads", 0)
    if engine.stage == 3:  # materialise every unit to read the weights
        for u in params.units:
            params._materialise(u)
    last = tm.snapshot(net)
    extra = {"held_max": max(held) if held else 0,
             "numel": engine.numel,
             "slice": params.part.numel() if engine.stage == 3 else 0,
             "persistent": sum(u.numel for u in getattr(params, "units", [])
                               if u.persistent),
             "max_unit": max((u.numel for u in getattr(params, "units", [])),
                             default=0),
             # After the first step (which gathers every unit once).
             "loads_per_step": (loads_end - loads.get(1, 0))
             / max(steps - 1, 1),
             "partitioned_units": sum(1 for u in getattr(params, "units", [])
                                      if u.entries and not u.persistent)}
    engine.close()
    if rank == 0:
        torch.save({"first": first, "last": last, "extra": extra}, out)


def run_gathered(out, config, servers):
    import zeroshard
    net = tm.model()
    engine, _, _, _ = zeroshard.initialize(model=net, config=config,
                                           servers=servers,
                                           job_id="torch-worker")
    rank = engine.rank
    for step in range(2):
        x, y = tm.batch(step, 0, rank)
        engine.backward(tm.loss_of(engine, x, y, step))
        engine.step()
        if step == 0:
            w = net.mix.weight
            with zeroshard.GatheredParameters(w, modifier_rank=1):
                seen = w.detach().clone()
                if rank == 1:
                    with torch.no_grad():
                        w.fill_(0.5)
            with zeroshard.GatheredParameters(w):
                after = w.detach().clone()
    engine.close()
    torch.save({"seen": seen, "after": after}, f"{out}.{rank}")


def main():
    mode, out = sys.argv[1], sys.argv[2]
    if mode == "exit":
        run_exit(out, sys.argv[3])
        return
    if mode == "gathered":
        run_gathered(out, json.loads(sys.argv[3]), sys.argv[4])
        return
    steps = int(sys.argv[3])
    if mode == "ddp":
        run_ddp(out, steps, int(sys.argv[4]), float(sys.argv[5]),
                float(sys.argv[6]), float(sys.argv[7]))
    else:
        run_zeroshard(out, steps, json.loads(sys.argv[4]), sys.argv[5],
                      *sys.argv[6:7])


if __name__ == "__main__":
    main()
