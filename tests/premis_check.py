"""Reads `ibi log ROOT NAME --premis` back with Archivematica's own PREMIS reader
(metsrw's premisrw plugin) and compares it, event by event, with `ibi --json
log ROOT NAME`: the same identifiers, types, dates, outcomes and agents, in order.

usage: premis_check.py PREMIS.xml LOG.jsonl
Prints one line per event read; exits 1 naming the first difference.
"""
import json, sys

from lxml import etree
from metsrw.plugins import premisrw

premis_file, log_file = sys.argv[1], sys.argv[2]
tree = etree.parse(premis_file).getroot()
ns = {"premis": "http://www.loc.gov/premis/v3"}
if tree.tag != "{http://www.loc.gov/premis/v3}premis" or tree.get("version") != "3.0":
    sys.exit(f"not a PREMIS 3 document: {tree.tag} version {tree.get('version')}")
events = [premisrw.PREMISEvent.fromtree(el) for el in tree.findall("premis:event", ns)]
agents = {a.agent_identifier_value: a for a in
          (premisrw.PREMISAgent.fromtree(el) for el in tree.findall("premis:agent", ns))}
logged = [json.loads(line) for line in open(log_file) if line.strip()]
if len(events) != len(logged):
    sys.exit(f"{len(events)} PREMIS events, {len(logged)} logged")
for read, want in zip(events, logged):
    agent = read.linking_agent_identifier_value
    label = f"{want['agent']['user']}@{want['agent']['host']}, ibi {want['agent']['version']}"
    if want["agent"].get("restriction"):
        label += f", {want['agent']['restriction']}"
    checks = [
        ("identifier", read.event_identifier_value, want["id"].removeprefix("urn:uuid:")),
        ("type", read.event_type, want["type"]),
        ("date", read.event_date_time, want["date"]),
        ("outcome", read.event_outcome, want["outcome"]),
        ("agent", agent, label),
        ("agent named", agents[agent].agent_name if agent in agents else None,
         f"{want['agent']['user']}@{want['agent']['host']}"),
    ]
    for what, got, expected in checks:
        if got != expected:
            sys.exit(f"event {want['seq']}: {what} {got!r}, logged {expected!r}")
    print(f"{read.event_type}\t{read.event_date_time}\t{read.event_outcome}\t{agent}")
