"""Kueue's webhook configurations (its manifests, as JSON on stdin) made fit for the local cluster:
only the webhooks for pods and Kueue's own objects, called at a URL on this machine with our
certificate authority, the pod ones only for pods that name a LocalQueue. JSON out (kueue.sh)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator

KUEUE_GROUP = "kueue.x-k8s.io"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def wanted(hook: dict) -> bool:
    """A webhook for pods or for Kueue's own objects (the integrations we do not run are left out:
    with failurePolicy Fail, an unserved one would refuse every Job, Deployment...)."""
    for rule in hook.get("rules") or []:
        if KUEUE_GROUP in rule.get("apiGroups", []) or "pods" in rule.get("resources", []):
            return True
    return False


def adapt(config: dict, name: str, url: str, ca: str) -> dict:
    """One webhook configuration renamed, its wanted webhooks pointed at ``url``."""
    hooks = []
    for hook in config.get("webhooks") or []:
        if not wanted(hook):
            continue
        path = hook["clientConfig"]["service"].get("path", "")
        hook["clientConfig"] = {"url": url + path, "caBundle": ca}
        if any("pods" in r.get("resources", []) for r in hook.get("rules") or []):
            hook["objectSelector"] = {
                "matchExpressions": [{"key": QUEUE_LABEL, "operator": "Exists"}]
            }
        hooks.append(hook)
    return {
        "apiVersion": config["apiVersion"],
        "kind": config["kind"],
        "metadata": {"name": name},
        "webhooks": hooks,
    }


def objects(text: str) -> Iterator[dict]:
    """The objects of kubectl's JSON output: one after another, or a List of them."""
    decoder, at = json.JSONDecoder(), 0
    while text[at:].strip():
        obj, end = decoder.raw_decode(text, at + len(text[at:]) - len(text[at:].lstrip()))
        at = end
        yield from obj["items"] if obj.get("kind") == "List" else [obj]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--ca", required=True, help="the CA bundle, base64")
    parser.add_argument("--names", nargs=2, required=True, help="mutating, validating")
    args = parser.parse_args()
    configs = list(objects(sys.stdin.read()))
    names = {
        "MutatingWebhookConfiguration": args.names[0],
        "ValidatingWebhookConfiguration": args.names[1],
    }
    items = [adapt(cfg, names[cfg["kind"]], args.url, args.ca) for cfg in configs]
    json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)


if __name__ == "__main__":
    main()
