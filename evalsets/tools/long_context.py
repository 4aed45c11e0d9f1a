#!/usr/bin/env python3
"""Regenerates the long-context cases of evalsets/support-assistant.yaml.

The five long documents (a changelog, a data processing addendum, an incident log, an API
reference and a subscription agreement) are built deterministically from the templates below
with a fixed seed, and each hides one fact the question asks for. The script rewrites the block
between the markers `# BEGIN GENERATED long-context` and `# END GENERATED long-context` in the
YAML file, so the eval set stays one self-contained file.

Usage: python3 evalsets/tools/long_context.py [evalsets/support-assistant.yaml]
"""

import datetime
import json
import random
import sys
from pathlib import Path

BEGIN = "# BEGIN GENERATED long-context"
END = "# END GENERATED long-context"


def changelog(rng):
    components = ["the board view", "the timeline", "task comments", "the time tracker",
                  "the mobile app", "desktop sync", "the search bar", "recurring tasks",
                  "the Slack integration", "the GitHub integration", "calendar sync",
                  "the audit log", "project templates", "task dependencies", "file previews"]
    symptoms = ["showed stale data", "scrolled back to the top", "duplicated entries",
                "did not load", "used the wrong time zone", "lost unsaved text",
                "showed an empty state", "sent notifications twice", "ignored filters",
                "displayed truncated names"]
    conditions = ["after switching workspaces", "on slow connections",
                  "when a project had more than 1,000 tasks", "for members with read-only access",
                  "right after midnight UTC", "when the browser language was not English",
                  "after an archived project was restored", "while offline mode was on",
                  "when two people edited the same task", "on tablets in landscape mode"]
    improvements = ["Board columns now remember their width per member.",
                    "The timeline loads up to twice as fast for large projects.",
                    "Task descriptions support checklists inside tables.",
                    "Search now finds text inside attached PDF files.",
                    "Admins can restrict who may create public share links.",
                    "Notification e-mails group updates from the same hour.",
                    "The mobile app supports biometric unlock.",
                    "Recurring tasks can skip public holidays.",
                    "The API returns rate-limit headers on every response.",
                    "Calendar sync shows task durations as busy time.",
                    "Project templates can include default assignees.",
                    "The audit log can be filtered by member and action.",
                    "Comments can be edited for 15 minutes after posting.",
                    "Imports from Trello keep label colours.",
                    "Keyboard shortcuts are listed under the ? key."]
    lines = ["# Orbitly release notes", "",
             "Every release of the Orbitly web app, desktop app and mobile apps since version 3.0.0, newest last.", ""]
    versions = [(3, m, 0) for m in range(0, 12)] + [(4, m, 0) for m in range(0, 24)]
    day = datetime.date(2023, 1, 10)
    for (major, minor, patch) in versions:
        day += datetime.timedelta(days=rng.randint(12, 17))
        version = f"{major}.{minor}.{patch}"
        lines.append(f"## {version} ({day.isoformat()})")
        lines.append("")
        n = rng.randint(4, 6)
        for i in range(n):
            if version == "4.3.0" and i == 2:
                lines.append("- Added CSV export of time reports: open Reports > Time and choose Export; "
                             "each row is one time entry with member, task, project, start, end and duration.")
            elif rng.random() < 0.35:
                lines.append("- " + rng.choice(improvements))
            else:
                lines.append(f"- Fixed an issue where {rng.choice(components)} {rng.choice(symptoms)} "
                             f"{rng.choice(conditions)}.")
        lines.append("")
    return "\n".join(lines)


def dpa(rng):
    vendors = [
        ("Cumulus Hosting B.V.", "Primary application hosting and databases", "Amsterdam, Netherlands"),
        ("Postwise Ltd.", "Transactional e-mail delivery", "Dublin, Ireland"),
        ("Ledgerline Inc.", "Payment processing and invoicing", "Dublin, Ireland (EU entity)"),
        ("Signalhouse AB", "Push notifications for the mobile apps", "Stockholm, Sweden"),
        ("Northwind Storage GmbH", "Storage of encrypted backups", "Frankfurt, Germany"),
        ("Helpdeck S.A.S.", "Customer support ticketing", "Paris, France"),
        ("Metricbay Oy", "Product analytics (pseudonymised)", "Helsinki, Finland"),
        ("Scanlight Sp. z o.o.", "Malware scanning of uploaded files", "Warsaw, Poland"),
        ("Telequill S.r.l.", "SMS delivery for two-factor authentication", "Milan, Italy"),
        ("Brightgate NV", "Content delivery network for static assets", "Brussels, Belgium"),
    ]
    clauses = [
        ("Definitions", "In this Addendum, \"Customer Data\" means all data that the Customer or its members submit to the Service, including tasks, comments, files and time entries. \"Processing\" has the meaning given in the GDPR. \"Subprocessor\" means any processor engaged by Orbitly to process Customer Data on its behalf."),
        ("Scope and roles", "The Customer is the controller and Orbitly is the processor of Customer Data. Orbitly processes Customer Data only on documented instructions from the Customer, which are given by this Addendum, the Agreement and the Customer's use and configuration of the Service."),
        ("Confidentiality", "Orbitly ensures that every person authorised to process Customer Data is bound by a duty of confidentiality, receives training on data protection at least once a year, and has access only to the data needed for their role."),
        ("Security measures", "Orbitly maintains the technical and organisational measures described in Annex II, including encryption of Customer Data in transit with TLS 1.2 or later and at rest with AES-256, role-based access control, logging of administrative access, and regular penetration tests by an independent firm."),
        ("Personal data breaches", "Orbitly notifies the Customer without undue delay, and in any event within 48 hours, after becoming aware of a personal data breach affecting Customer Data. The notice describes the nature of the breach, the categories of data concerned, the likely consequences and the measures taken."),
        ("Assistance", "Taking into account the nature of the processing, Orbitly assists the Customer with appropriate measures for responding to requests from data subjects and with data protection impact assessments where the Service is concerned."),
        ("Audits", "Orbitly makes available the information necessary to demonstrate compliance with this Addendum, including its most recent independent audit report. The Customer may request an on-site audit once per calendar year with at least 30 days' notice."),
        ("International transfers", "Orbitly stores and processes Customer Data within the European Economic Area. Where a Subprocessor processes Customer Data outside the EEA, the transfer is governed by the Standard Contractual Clauses adopted by the European Commission."),
        ("Return and deletion", "After the end of the Agreement, Orbitly keeps Customer Data for 60 days so that the Customer can export it or restore the workspace, and then deletes it, including from backups within a further 35 days, unless law requires otherwise."),
        ("Liability", "Each party's liability under this Addendum is subject to the limitations of liability in the Agreement. Nothing in this Addendum limits a party's liability for breaches of data protection law that cannot be limited by contract."),
    ]
    out = ["# Orbitly Data Processing Addendum (version 2025-03)", "",
           "This Data Processing Addendum (\"Addendum\") forms part of the Orbitly Subscription Agreement (\"Agreement\") between Orbitly and the Customer.", ""]
    filler = ["The parties agree that this clause is to be read together with the corresponding provisions of the Agreement.",
              "Where this clause and the Agreement conflict, this Addendum prevails as far as the processing of Customer Data is concerned.",
              "Orbitly reviews the measures described here at least once a year and updates them where the state of the art requires.",
              "Any notice under this clause is given in writing to the contact named in the Customer's workspace settings.",
              "Costs arising from this clause are borne by each party unless the Agreement says otherwise."]
    for round_ in range(3):
        for i, (title, text) in enumerate(clauses):
            n = round_ * len(clauses) + i + 1
            heading = title if round_ == 0 else f"{title} (supplementary provisions)"
            out.append(f"## {n}. {heading}")
            out.append("")
            out.append(text if round_ == 0 else " ".join(rng.sample(filler, 3)))
            out.append(" ".join(rng.sample(filler, 2)))
            out.append("")
    out.append("## Annex III: Subprocessors")
    out.append("")
    out.append("| Subprocessor | Purpose | Location |")
    out.append("|---|---|---|")
    for v in vendors:
        out.append(f"| {v[0]} | {v[1]} | {v[2]} |")
    out.append("")
    out.append("Orbitly informs the Customer of any intended addition or replacement of a Subprocessor at least 30 days in advance by e-mail to the workspace owner. The Customer may object on reasonable data protection grounds within that period.")
    return "\n".join(out)


def incidents(rng):
    causes = [
        "a database failover that took longer than expected after a storage node failed",
        "a configuration change that lowered the connection limit of the API load balancer",
        "a memory leak in the notification worker introduced in the previous release",
        "a full disk on the search cluster caused by unrotated logs",
        "an upstream DNS provider outage affecting one region",
        "a faulty migration that locked the tasks table for several minutes",
        "a traffic spike from a misconfigured customer integration retrying without backoff",
        "a bug in the cache invalidation of board views after a deploy",
        "a network partition between two availability zones",
        "a third-party e-mail provider throttling outbound mail",
        "a mobile push signing key rotation done in the wrong order",
        "a slow query introduced by a new index hint on the time-entries table",
    ]
    services = ["web app", "API", "desktop sync", "e-mail notifications", "search", "mobile push", "file uploads"]
    remediations = [
        "added an alert on failover duration and rehearsed the runbook",
        "moved the limit into reviewed infrastructure code",
        "fixed the leak and added a memory ceiling with automatic restarts",
        "enabled log rotation and added disk usage alerts at 70 %",
        "added a secondary DNS provider",
        "split the migration into batches and added a lock timeout",
        "added per-token rate limits and contacted the customer",
        "corrected the invalidation logic and added an integration test",
        "added cross-zone health checks that fail over faster",
        "spread mail across two providers",
        "documented the rotation order and automated it",
        "removed the hint and added query-plan checks to CI",
    ]
    out = ["# Orbitly incident reports, 2025", "",
           "Post-incident summaries published for customers. Times are UTC.", ""]
    numbers = list(range(2251, 2311))
    when = datetime.date(2025, 1, 3)
    for n in numbers:
        when += datetime.timedelta(days=rng.randint(3, 8))
        dur = rng.randint(9, 140)
        svc = rng.choice(services)
        out.append(f"## INC-{n} ({when.isoformat()})")
        out.append("")
        if n == 2291:
            out.append("Impact: desktop sync failed for all customers for 47 minutes; the web app and API were not affected.")
            out.append("Root cause: an expired TLS certificate on the sync gateway. The renewal job had been disabled during a migration and its failure alert went to a retired channel.")
            out.append("Remediation: renewed the certificate, re-enabled the renewal job, moved its alert to the on-call rota, and added a check that fails when any certificate expires within 21 days.")
        else:
            i = rng.randrange(len(causes))
            out.append(f"Impact: the {svc} was degraded for {dur} minutes; about {rng.randint(2, 60)} % of requests failed or were slow.")
            out.append(f"Root cause: {causes[i]}.")
            out.append(f"Remediation: we {remediations[i]}.")
        out.append("")
    return "\n".join(out)


def api_reference(rng):
    endpoints = [
        ("projects", "Projects in the workspace", 100, 25),
        ("tasks", "Tasks across all projects the token can see", 250, 50),
        ("members", "Members of the workspace", 200, 50),
        ("time-entries", "Time entries, newest first", 500, 100),
        ("comments", "Comments on tasks", 100, 20),
        ("labels", "Labels defined in the workspace", 100, 100),
        ("attachments", "File attachments on tasks", 50, 20),
        ("webhooks", "Registered webhooks", 20, 20),
        ("boards", "Boards and their columns", 100, 50),
        ("custom-fields", "Custom task fields defined in the workspace", 100, 100),
        ("sprints", "Sprints of projects that use sprint planning", 100, 25),
        ("dependencies", "Dependencies between tasks", 200, 100),
        ("saved-views", "Saved filters and views shared in the workspace", 50, 25),
    ]
    fields = {
        "projects": ["id", "name", "archived", "created_at", "owner_id"],
        "tasks": ["id", "project_id", "title", "status", "assignee_id", "due_date", "estimate_minutes"],
        "members": ["id", "email", "role", "joined_at"],
        "time-entries": ["id", "task_id", "member_id", "started_at", "ended_at", "minutes"],
        "comments": ["id", "task_id", "author_id", "body", "created_at"],
        "labels": ["id", "name", "colour"],
        "attachments": ["id", "task_id", "file_name", "size_bytes", "uploaded_at"],
        "webhooks": ["id", "url", "events", "active"],
        "boards": ["id", "project_id", "name", "columns", "position"],
        "custom-fields": ["id", "name", "type", "options", "required"],
        "sprints": ["id", "project_id", "name", "starts_on", "ends_on", "goal"],
        "dependencies": ["id", "blocking_task_id", "blocked_task_id", "type"],
        "saved-views": ["id", "name", "filter", "shared", "owner_id"],
    }
    out = ["# Orbitly REST API v2 reference", "",
           "Base URL: https://api.orbitly.example/v2. Authenticate with a personal or workspace token in the header `Authorization: Bearer <token>`. The API is available on the Team plan (100 requests per minute per token) and the Business plan (600 requests per minute per token).", "",
           "## Pagination", "",
           "List endpoints are paginated with `page_size` and `cursor`. The response contains `next_cursor`, which is null on the last page. Each endpoint has its own default and maximum `page_size`, listed with the endpoint; a larger value is rejected with status 400.", "",
           "## Errors", "",
           "Errors are JSON objects with `code` and `message`. Status 401 means the token is missing or revoked, 403 that the token's member lacks permission, 404 that the object does not exist or is not visible, 409 a version conflict, 422 a validation error, and 429 that the rate limit was exceeded; wait for the number of seconds in the `Retry-After` header.", ""]
    for (name, desc, maxp, default) in endpoints:
        out.append(f"## GET /v2/{name}")
        out.append("")
        out.append(f"{desc}. Query parameters: `page_size` (integer, default {default}, maximum {maxp}), `cursor` (string), `updated_since` (RFC 3339 timestamp).")
        out.append("")
        out.append("Each item has the fields " + ", ".join(f"`{f}`" for f in fields[name]) + ".")
        out.append("")
        example = {f: ("…" if f != "id" else f"{name[:3]}_{rng.randint(10000, 99999)}") for f in fields[name]}
        out.append("Example item: `" + json.dumps(example, ensure_ascii=False) + "`")
        out.append("")
        out.append(f"## POST /v2/{name}")
        out.append("")
        out.append(f"Creates one object. The body is a JSON object with the writable fields of an item ({', '.join(f'`{f}`' for f in fields[name][1:])}). Returns 201 with the created item. Requires a token whose member may edit {name}.")
        out.append("")
        out.append(f"## PATCH /v2/{name}/{{id}}")
        out.append("")
        out.append("Updates the given fields of one object. Send the `If-Match` header with the item's `version` to avoid overwriting concurrent changes; a stale version returns 409.")
        out.append("")
        out.append(f"## DELETE /v2/{name}/{{id}}")
        out.append("")
        out.append("Deletes one object. Deleted objects are kept in the workspace trash for 30 days and can be restored from the web app; they no longer appear in API lists.")
        out.append("")
    out.append("## Webhook delivery")
    out.append("")
    out.append("Webhooks receive a POST with a JSON body and an `Orbitly-Signature` header (HMAC-SHA256 of the body with the webhook secret). Deliveries that do not receive a 2xx response within 10 seconds are retried up to 8 times with exponential backoff, starting at 30 seconds.")
    return "\n".join(out)


def agreement(rng):
    sections = [
        ("Services", "Orbitly provides the Service described in the Order Form to the Customer for the Subscription Term. Orbitly may improve the Service over time, provided that it does not materially reduce the functionality purchased by the Customer."),
        ("Accounts", "The Customer is responsible for its members' use of the Service and for keeping login credentials confidential. The Customer notifies Orbitly promptly of any unauthorised use of an account."),
        ("Fees and payment", "The Customer pays the fees stated in the Order Form. Invoices are due within thirty (30) days of the invoice date. Late amounts bear interest at one percent (1 %) per month or the highest rate permitted by law, whichever is lower."),
        ("Taxes", "Fees exclude taxes. The Customer pays all sales, use, value added and similar taxes, except taxes on Orbitly's income. EU customers who provide a valid VAT identification number are invoiced under the reverse-charge procedure."),
        ("Term and renewal", "The Subscription Term starts on the date in the Order Form and renews automatically for periods equal to the initial term unless either party gives notice of non-renewal at least thirty (30) days before the end of the current term."),
        ("Termination for convenience", "The Customer may terminate this Agreement for convenience by giving Orbitly ninety (90) days' written notice. Fees for the remainder of the then-current Subscription Term are not refunded, except as stated in the refund policy for annual plans."),
        ("Termination for cause", "Either party may terminate this Agreement if the other party materially breaches it and does not cure the breach within fifteen (15) days after written notice describing the breach."),
        ("Effect of termination", "On termination, the Customer's access ends. Orbitly keeps Customer Data for sixty (60) days so that the Customer can export it, and then deletes it as described in the Data Processing Addendum."),
        ("Warranties", "Orbitly warrants that the Service will perform materially as described in its documentation. The Customer's exclusive remedy for a breach of this warranty is that Orbitly corrects the non-conformity or, if it cannot, either party may terminate the affected Order Form."),
        ("Service levels", "For Business plans, Orbitly commits to 99.9 % monthly availability. If availability falls below that level, the Customer may claim a service credit of ten percent (10 %) of the monthly fee for the affected month by contacting support within thirty (30) days."),
        ("Confidentiality", "Each party protects the other party's Confidential Information with at least reasonable care and uses it only to perform this Agreement. These obligations survive for five (5) years after termination."),
        ("Limitation of liability", "Except for breaches of confidentiality and the Customer's payment obligations, each party's total liability is limited to the fees paid in the twelve (12) months before the event giving rise to the claim. Neither party is liable for indirect or consequential damages."),
        ("Indemnification", "Orbitly defends the Customer against third-party claims that the Service infringes intellectual property rights and pays the resulting damages, provided the Customer notifies Orbitly promptly and allows Orbitly to control the defence."),
        ("Governing law", "This Agreement is governed by the laws of Ireland. The courts of Dublin have exclusive jurisdiction, except that either party may seek injunctive relief in any competent court."),
        ("Notices", "Notices must be in writing and are effective when received. Notices to Orbitly go to legal@orbitly.example; notices to the Customer go to the e-mail address of the workspace owner."),
        ("Miscellaneous", "This Agreement is the entire agreement between the parties on its subject matter. If a provision is held unenforceable, the rest remains in effect. Neither party may assign this Agreement without the other's consent, except to a successor in a merger or acquisition."),
    ]
    boiler = [
        "Headings are for convenience only and do not affect interpretation.",
        "The words \"including\" and \"includes\" mean including without limitation.",
        "A reference to a party includes its permitted successors and assigns.",
        "Any failure to enforce a provision is not a waiver of the right to enforce it later.",
        "The parties are independent contractors and nothing creates a partnership or agency.",
        "Obligations that by their nature should survive termination do survive it.",
    ]
    out = ["# Orbitly Subscription Agreement", "",
           "This Subscription Agreement (\"Agreement\") is entered into between Orbitly Ltd., a company registered in Ireland (\"Orbitly\"), and the customer named in the Order Form (\"Customer\").", ""]
    for i, (title, text) in enumerate(sections, 1):
        out.append(f"## {i}. {title}")
        out.append("")
        out.append(f"{i}.1 {text}")
        out.append(f"{i}.2 " + " ".join(rng.sample(boiler, 3)))
        out.append(f"{i}.3 " + " ".join(rng.sample(boiler, 2)))
        out.append(f"{i}.4 " + " ".join(rng.sample(boiler, 2)))
        out.append("")
    out.append("## Schedule 1: Definitions")
    out.append("")
    for term, meaning in [("Order Form", "the ordering document signed or accepted online by the Customer"),
                          ("Subscription Term", "the period stated in the Order Form, including renewals"),
                          ("Customer Data", "data submitted to the Service by or for the Customer"),
                          ("Confidential Information", "non-public information disclosed by a party that is marked confidential or should reasonably be understood to be confidential"),
                          ("Service", "the Orbitly web, desktop and mobile applications and the API")]:
        out.append(f"- \"{term}\" means {meaning}. " + rng.choice(boiler))
    return "\n".join(out)


CASES = [
    ("long-changelog-csv-export", changelog,
     "Here are our release notes. In which version was CSV export of time reports added?",
     [{"type": "contains", "value": "4.3.0"}]),
    ("long-dpa-backup-subprocessor", dpa,
     "Our legal team sent me your data processing addendum, pasted below. Which company stores Orbitly's encrypted backups, and in which city?",
     [{"type": "contains", "value": "Northwind"}, {"type": "contains", "value": "Frankfurt"}]),
    ("long-incident-root-cause", incidents,
     "Below are your published incident reports. What was the root cause of INC-2291?",
     [{"type": "contains", "value": "certificate", "ignore_case": True}]),
    ("long-api-page-size", api_reference,
     "I'm reading your API reference (pasted below). What is the maximum page_size for GET /v2/tasks?",
     [{"type": "contains", "value": "250"}]),
    ("long-contract-termination-notice", agreement,
     "This is the subscription agreement we signed (pasted below). How much notice do we have to give to terminate for convenience?",
     [{"type": "contains", "value": ["90 days", "ninety (90) days", "ninety days", "90 days'"], "mode": "any", "ignore_case": True}]),
]


def block():
    rng = random.Random(20250301)
    lines = [BEGIN, "  # Generated by evalsets/tools/long_context.py; edit the script, not this block."]
    for (cid, make, question, checks) in CASES:
        doc = make(rng)
        content = f"{question}\n\n---\n\n{doc}\n\n---\n\n{question}"
        lines.append(f"  - id: {cid}")
        lines.append("    category: long-context")
        lines.append("    weight: 1")
        lines.append("    tags: [long-document]")
        lines.append("    input:")
        lines.append("      - role: user")
        lines.append("        content: |-")
        for l in content.split("\n"):
            lines.append(("          " + l) if l else "")
        lines.append("    checks:")
        for c in checks:
            lines.append("      - " + json.dumps(c, ensure_ascii=False))
        sys.stderr.write(f"{cid}: {len(content)} chars, ~{len(content) // 4} tokens\n")
    lines.append("  " + END)
    return "\n".join(lines)


def main():
    path = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "support-assistant.yaml")
    text = path.read_text(encoding="utf-8")
    start = text.index(BEGIN)
    # The BEGIN marker is indented like a case; keep the indentation before it.
    line_start = text.rindex("\n", 0, start) + 1
    end = text.index(END) + len(END)
    new = text[:line_start] + block() + text[end:]
    path.write_text(new, encoding="utf-8")


if __name__ == "__main__":
    main()
