"""JSON-lines records of the host checks (gpu_host_check.sh, manycore_host_check.sh): the
reader their summaries share. Lines that are not a JSON object (a tool's banner, a truncated
last line after a watchdog kill) are skipped."""
import json


def load(path):
    """The JSON objects of the file at `path`, one per line that holds one, in file order."""
    recs = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                try:
                    recs.append(json.loads(line))
                except ValueError:
                    pass
    return recs
