"""What other S3 tools do with an ibi collection, for the tests, through boto3
(the client aws-cli is built on; moto[server] brings it):

  s3_peer.py ENDPOINT keys BUCKET PREFIX
      prints every key under PREFIX/, one per line (JSON strings, so any
      character survives).
  s3_peer.py ENDPOINT download BUCKET PREFIX DEST
      downloads every object under PREFIX/ to DEST/<key after PREFIX/>, as
      `aws s3 cp --recursive` does.
  s3_peer.py ENDPOINT make-old BUCKET PREFIX
      rewrites the collection under PREFIX as an ibi before 0.2 stored it: the
      item files' keys percent-encoded the way object_store's Path::from does,
      and commit markers without their "keys" field.
"""

import json
import os
import sys

import boto3

ENDPOINT, COMMAND, BUCKET, PREFIX = sys.argv[1:5]
s3 = boto3.client(
    "s3",
    endpoint_url=ENDPOINT,
    region_name="us-east-1",
    aws_access_key_id="test",
    aws_secret_access_key="test",
)

# object_store 0.14's path::parts::INVALID, plus every byte outside ASCII.
ENCODED = set("/\\{^}%`]\">[~<#|\r\n*?")


def encode_part(part):
    out = []
    for ch in part:
        if ord(ch) < 0x20 or ord(ch) == 0x7F or ord(ch) > 0x7F or ch in ENCODED:
            out.extend("%%%02X" % b for b in ch.encode("utf-8"))
        else:
            out.append(ch)
    return "".join(out)


def keys(prefix):
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/"):
        for obj in page.get("Contents", []):
            yield obj["Key"]


def download(dest):
    for key in keys(PREFIX):
        rel = key[len(PREFIX) + 1 :]
        path = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        s3.download_file(BUCKET, key, path)


def make_old():
    markers = PREFIX + "/.ibi/items/"
    for key in list(keys(PREFIX)):
        rel = key[len(PREFIX) + 1 :]
        if rel.startswith(".ibi/items/"):
            marker = json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
            marker.pop("keys", None)
            s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps(marker).encode())
        elif not rel.startswith(".ibi/") and not rel.startswith(".ibip/"):
            parts = rel.split("/")
            # The name path (four parts) is plain ASCII; the file path below it is encoded.
            old = "/".join(parts[:4] + [encode_part(p) for p in parts[4:]])
            if old != rel:
                s3.copy_object(Bucket=BUCKET, Key=PREFIX + "/" + old, CopySource={"Bucket": BUCKET, "Key": key})
                s3.delete_object(Bucket=BUCKET, Key=key)


def forget_log_index():
    """The event log as an ibi from before the per-item index left it."""
    for key in list(keys(PREFIX + "/.ibi/log-items")):
        s3.delete_object(Bucket=BUCKET, Key=key)
    s3.delete_object(Bucket=BUCKET, Key=PREFIX + "/.ibi/log-items-from")


if COMMAND == "keys":
    for key in keys(PREFIX):
        print(json.dumps(key))
elif COMMAND == "download":
    download(sys.argv[5])
elif COMMAND == "make-old":
    make_old()
elif COMMAND == "forget-log-index":
    forget_log_index()
elif COMMAND == "get":
    sys.stdout.write(s3.get_object(Bucket=BUCKET, Key=PREFIX + "/" + sys.argv[5])["Body"].read().decode())
else:
    sys.exit("unknown command " + COMMAND)
