"""Recomputes an ibi witness root and checks an inclusion proof, with hashlib only.

usage: witness_check.py root WITNESS.json LIST.jsonl   (LIST: `ibi list --json`)
       witness_check.py proof PROOF.json               (from `ibi witness --prove`)
The tree is RFC 6962's (ARCHITECTURE.md, "The witness"); the signature is not
checked here (hashlib has no Ed25519): `ibi witness --check` does that.
"""
import hashlib, json, sys

H = lambda b: hashlib.sha256(b).digest()
leaf = lambda name, identity: H(b"\0" + f"{name}\n{identity}".encode())

def root(leaves):
    if not leaves:
        return H(b"")
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << (len(leaves) - 1).bit_length() - 1
    return H(b"\1" + root(leaves[:k]) + root(leaves[k:]))

def check(proof):
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

if sys.argv[1] == "root":
    witness = json.load(open(sys.argv[2]))
    items = [json.loads(line) for line in open(sys.argv[3]) if line.strip()]
    pairs = sorted((i["name"].encode(), i["identity"]) for i in items if i["status"] == "present")
    mine = root([leaf(n.decode(), i) for n, i in pairs]).hex()
    print(mine)
    sys.exit(0 if mine == witness["root"] and len(pairs) == witness["items"] else 1)
sys.exit(0 if check(json.load(open(sys.argv[2]))) else 1)
