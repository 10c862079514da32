"""One elastic worker of torch_elastic_test.py:

  torch_elastic_worker.py NAME SERVERS STEPS LEAVE_AT WAIT_AT OUT [noclose]

Trains tests/python/torch_models.py's model through zeroshard.initialize
with elastic={...} (no torchrun), following engine.global_steps; calls
engine.leave() before step LEAVE_AT (-1: never); before step WAIT_AT
(-1: never) waits until the job has 3 members, so that a joiner is in
the membership whatever the machine's speed; writes the (step, world
size, rank) of every step it made to OUT as JSON. With noclose it ends
without engine.close() and writes to OUT.exit whether a process group was
still alive when its last atexit handler ran."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models as tm  # noqa: E402
import zeroshard  # noqa: E402
from torch_engine_test import config  # noqa: E402


def main():
    name, servers, steps, leave_at, wait_at, out = sys.argv[1:7]
    steps, leave_at, wait_at = int(steps), int(leave_at), int(wait_at)
    close = sys.argv[7:8] != ["noclose"]
    if not close:
        tm.report_group_at_exit(out + ".exit")
    cfg = config(2, zeroshard={"checkpoint_interval": 4})
    engine, _, _, _ = zeroshard.initialize(
        model=tm.model(), config=cfg, servers=servers, job_id="elastic",
        elastic={"min_workers": 2, "worker_name": name, "op_timeout": 10})
    made = []
    while engine.global_steps < steps and not engine.left:
        step = engine.global_steps
        if step == wait_at:
            while len(engine._elastic.member.world()["members"]) < 3:
                time.sleep(0.05)
            wait_at = -1
        if step == leave_at:
            engine.leave()
        made.append((step, engine.world, engine.rank))
        x, y = tm.batch(step, 0, engine.rank)
        engine.backward(tm.loss_of(engine, x, y, step))
        engine.step()
    result = {"made": made, "left": engine.left,
              "final_step": engine.global_steps}
    if close:
        engine.close()
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
