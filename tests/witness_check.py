"""An independent checker of ibi's witnesses and proofs, written from
docs/formats.md alone ("The witness"): hashlib for the tree, pyca/cryptography
for Ed25519. It shares no code with ibi.

usage: witness_check.py root WITNESS.json LIST.jsonl [KEY]   (LIST: `ibi --json list`)
       witness_check.py proof PROOF.json [KEY]               (from `ibi witness --prove`)
       witness_check.py chain LOG.jsonl [WITNESS.json]        (LOG: `ibi --json log`)
       witness_check.py example EXAMPLE.json                 (docs/formats.md's worked example)
       witness_check.py checkpoint NOTE KEY [SITE SITE_KEY]  (a site's `.ibi/checkpoints/*.note`)
KEY is the collection's published witness key (hex, from collection.toml or
/.well-known/ibi/witness-key); without it the witness's own key is used, which
proves only that the document is self-consistent. Exits 0 when every check
passes, 1 naming the first that fails, 2 on a bad command line.
"""
import hashlib, json, sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

H = lambda b: hashlib.sha256(b).digest()
leaf = lambda name, identity: H(b"\0" + f"{name}\n{identity}".encode())


def root(leaves):
    """RFC 6962's Merkle tree hash; the empty tree is SHA-256 of nothing."""
    if not leaves:
        return H(b"")
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << (len(leaves) - 1).bit_length() - 1
    return H(b"\1" + root(leaves[:k]) + root(leaves[k:]))


def message(w):
    """The signed bytes, by version (docs/formats.md)."""
    head = [w["collection"], w["date"], str(w["items"]), w["root"]]
    if "left_out" in w:
        lines = ["ibi-witness-v3", *head, str(w.get("log_events", 0)), w.get("log_head", "-"), str(w["left_out"])]
    elif "log_events" in w and "log_head" in w:
        lines = ["ibi-witness-v2", *head, str(w["log_events"]), w["log_head"]]
    else:
        lines = ["ibi-witness-v1", *head]
    return ("\n".join(lines) + "\n").encode()


def fail(why):
    print(why, file=sys.stderr)
    sys.exit(1)


def check_signature(w, key):
    if key is not None and key.lower() != w["public_key"].lower():
        fail(f"signed by {w['public_key']}, not by the collection's key {key}")
    try:
        Ed25519PublicKey.from_public_bytes(bytes.fromhex(w["public_key"])).verify(
            bytes.fromhex(w["signature"]), message(w))
    except (InvalidSignature, ValueError) as e:
        fail(f"the signature does not verify: {e!r}")
    if len(w.get("left_out_names", [])) > w.get("left_out", 0):
        fail("it names more left-out items than it says it left out")


def check_path(proof):
    fn, sn, r = proof["index"], proof["witness"]["items"] - 1, leaf(proof["name"], proof["identity"])
    for p in map(bytes.fromhex, proof["path"]):
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = H(b"\1" + p + r)
            while fn & 1 == 0 and fn:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = H(b"\1" + r + p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r.hex() == proof["witness"]["root"]


def genesis(collection):
    """The prev of event 1 of the log of `collection` (its id)."""
    return hashlib.sha256(f"ibi log of {collection}".encode()).hexdigest()


def check_chain(events, witness=None):
    """The log is whole: each body hashes to its hash, seq counts from 1, prev
    links, and event 1 begins the log of the witness's collection (or follows
    64 zeros: a log begun before logs were bound to their collection)."""
    prev, seq = "0" * 64, 0
    if events and witness is not None and events[0].get("prev") == genesis(witness.get("collection")):
        prev = events[0]["prev"]
    elif events and witness is None:
        prev = events[0].get("prev")
        print(f"event 1 follows {prev}: without the witness, its collection is not checked", file=sys.stderr)
    for event in events:
        event = dict(event)
        claimed = event.pop("hash")
        body = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        if hashlib.sha256(body.encode()).hexdigest() != claimed:
            fail(f"event {event.get('seq')}: its body does not hash to its hash")
        if event["seq"] != seq + 1 or event["prev"] != prev:
            fail(f"event {event.get('seq')}: it does not follow event {seq}")
        prev, seq = claimed, event["seq"]
        if witness is not None and seq == witness.get("log_events") and prev != witness.get("log_head"):
            fail(f"the witness signed head {witness.get('log_head')} at event {seq}, the log holds {prev}")
    if witness is not None and witness.get("log_events", 0) > seq:
        fail(f"the witness signed {witness['log_events']} events; the log holds {seq}")


def check_note(note, collection_key, site=None, site_key=None):
    """A C2SP signed note: the checkpoint text, a blank line, then signature
    lines `— NAME BASE64`. The collection's line: key id (SHA-256 of NAME, a
    newline, 0x01 and the key; first 4 bytes) then the Ed25519 signature of the
    text. A site's (tlog-cosignature v1): key id with 0x04, an 8-byte big-endian
    time, then the signature of `cosignature/v1\ntime T\n` and the text."""
    import base64
    text, _, sigs = note.partition("\n\n")
    text += "\n"
    origin, size, root = text.splitlines()[:3]
    lines = [l for l in sigs.splitlines() if l]
    def key_id(name, kind, key):
        return H(name.encode() + b"\n" + bytes([kind]) + key)[:4]
    found = {}
    for line in lines:
        dash, name, blob = line.split(" ")
        if dash != "\u2014":
            fail(f"not a signature line: {line!r}")
        found.setdefault(name, []).append(base64.b64decode(blob))
    key = bytes.fromhex(collection_key)
    ok = any(b[:4] == key_id(origin, 1, key) and verify(key, b[4:], text.encode()) for b in found.get(origin, []))
    if not ok:
        fail(f"no good signature of {origin} by the collection's key")
    if site is not None:
        skey = bytes.fromhex(site_key)
        def cosigned(b):
            if len(b) != 76 or b[:4] != key_id(site, 4, skey):
                return False
            t = int.from_bytes(b[4:12], "big")
            return verify(skey, b[12:], f"cosignature/v1\ntime {t}\n".encode() + text.encode())
        if not any(cosigned(b) for b in found.get(site, [])):
            fail(f"no good cosignature by {site}")
    return origin, int(size), base64.b64decode(root).hex()


def verify(key, sig, msg):
    try:
        Ed25519PublicKey.from_public_bytes(key).verify(sig, msg)
        return True
    except (InvalidSignature, ValueError):
        return False


args = sys.argv[1:]
if args[:1] == ["root"] and len(args) in (3, 4):
    witness = json.load(open(args[1]))
    check_signature(witness, args[3] if len(args) == 4 else None)
    items = [json.loads(line) for line in open(args[2]) if line.strip()]
    left_out = set(witness.get("left_out_names", []))
    if witness.get("left_out", 0) > len(left_out):
        fail("more items were left out than are named: the root cannot be recomputed from a listing")
    pairs = sorted((i["name"].encode(), i["identity"]) for i in items
                   if i["status"] == "present" and i["name"] not in left_out)
    mine = root([leaf(n.decode(), i) for n, i in pairs]).hex()
    print(mine)
    sys.exit(0 if mine == witness["root"] and len(pairs) == witness["items"] else 1)
elif args[:1] == ["proof"] and len(args) in (2, 3):
    proof = json.load(open(args[1]))
    check_signature(proof["witness"], args[2] if len(args) == 3 else None)
    sys.exit(0 if check_path(proof) else 1)
elif args[:1] == ["chain"] and len(args) in (2, 3):
    events = [json.loads(line) for line in open(args[1]) if line.strip()]
    witness = json.load(open(args[2])) if len(args) == 3 else None
    if witness is not None:
        check_signature(witness, None)
    check_chain(events, witness)
    sys.exit(0)
elif args[:1] == ["checkpoint"] and len(args) in (3, 5):
    print(*check_note(open(args[1]).read(), *args[2:]), sep="\t")
    sys.exit(0)
elif args[:1] == ["example"] and len(args) == 2:
    example = json.load(open(args[1]))
    check_signature(example["witness"], example["witness"]["public_key"])
    check_chain(example["log"], example["witness"])
    sys.exit(0 if check_path(example["proof"]) else 1)
print(__doc__, file=sys.stderr)
sys.exit(2)
