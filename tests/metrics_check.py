"""Reads Prometheus text (from a file or stdin) and checks it.

  metrics_check.py FILE [NAME[:TYPE][>=VALUE] ...]

The text must parse with prometheus_client's parser (python3-prometheus-
client) and, more strictly, every line must be "# HELP", "# TYPE" or a
sample "name{labels} value"; every family needs HELP and TYPE before its
samples. Each NAME must have a sample (histograms: NAME_count); with :TYPE
its family must be of that type (counter, gauge, histogram); with >=VALUE,
some sample of it must be at least VALUE. Prints the checked values;
exits 1 naming the first problem.
"""

import math
import re
import sys

from prometheus_client.parser import text_string_to_metric_families

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*",?)*\})? '
                    r'(-?[0-9.eE+-]+|\+Inf|-Inf|NaN)$')


def main():
    text = open(sys.argv[1]).read()
    typed, helped = {}, set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            typed[name] = kind
        else:
            m = SAMPLE.match(line)
            if not m:
                print(f"not a sample line: {line!r}")
                return 1
            name = m.group(1)
            family = re.sub(r"_(bucket|sum|count)$", "", name) if name not in typed else name
            if family not in typed or family not in helped:
                print(f"sample before its # HELP / # TYPE: {line!r}")
                return 1
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append(s.value)
    if not samples:
        print("no samples")
        return 1
    for want in sys.argv[2:]:
        name, _, minimum = want.partition(">=")
        name, _, kind = name.partition(":")
        if kind and typed.get(name) != kind:
            print(f"{name} is a {typed.get(name)}, want a {kind}")
            return 1
        values = samples.get(name) or samples.get(name + "_count")
        if not values:
            print(f"missing metric {name}")
            return 1
        best = max(values)
        if minimum and not (best >= float(minimum)):
            print(f"{name} = {best}, want >= {minimum}")
            return 1
        if any(math.isnan(v) for v in values):
            print(f"{name} is NaN")
            return 1
        print(f"  {name} = {best:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
