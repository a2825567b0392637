"""A project's webhook configurations (its manifests, as kubectl's JSON on stdin) made fit for the
local cluster: every webhook called at a URL on this machine with our certificate authority
instead of through an in-cluster Service. JSON out (kueue.sh, volcano.sh).

With --only-group G, only the webhooks for G's objects and for pods are kept (the others, for
integrations not run here, would refuse every Job or Deployment with failurePolicy Fail); with
--pods-labelled L the pod webhooks see only pods carrying the label L, so that the project being
down never stops any other pod; with --names the two configurations are renamed."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator


def for_pods(hook: dict) -> bool:
    return any("pods" in rule.get("resources", []) for rule in hook.get("rules") or [])


def wanted(hook: dict, group: str | None) -> bool:
    """Every webhook, or (``group``) those for pods and for that API group's objects."""
    if group is None or for_pods(hook):
        return True
    return any(group in rule.get("apiGroups", []) for rule in hook.get("rules") or [])


def adapt(config: dict, args: argparse.Namespace, name: str) -> dict:
    """One webhook configuration, its wanted webhooks pointed at ``args.url``."""
    hooks = []
    for hook in config.get("webhooks") or []:
        if not wanted(hook, args.only_group):
            continue
        path = hook["clientConfig"]["service"].get("path", "")
        hook["clientConfig"] = {"url": args.url + path, "caBundle": args.ca}
        if args.pods_labelled and for_pods(hook):
            hook["objectSelector"] = {
                "matchExpressions": [{"key": args.pods_labelled, "operator": "Exists"}]
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
    parser.add_argument("--only-group", help="keep only this API group's webhooks and pods'")
    parser.add_argument("--pods-labelled", help="pod webhooks only for pods with this label")
    parser.add_argument("--names", nargs=2, help="rename: mutating, validating")
    args = parser.parse_args()
    kinds = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    items = []
    for config in objects(sys.stdin.read()):
        name = args.names[kinds.index(config["kind"])] if args.names else config["metadata"]["name"]
        items.append(adapt(config, args, name))
    json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)


if __name__ == "__main__":
    main()
