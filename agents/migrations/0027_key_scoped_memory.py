"""Memory scoped by the key that named the user (issue 35).

A ``per_user`` fact was kept under ``user:<name>`` whoever named the user, so any key could
read and write another key's users' facts; and a delegated turn kept its facts under
``user:<calling agent>``, shared by every user. From now on a user named by a key is
``key:<id>/user:<name>`` (``user:<name>`` only for a key trusted to speak for users across
keys, the new ``ApiKey.users_across_keys``), and ``Memory.user`` names the user whichever key
did.

The facts already stored under ``user:<name>`` move to the scope the new rule would have given
the turn that learnt them: the key of the thread where each was learnt, and for a delegated
turn the end user of the conversation that called it (the top thread's user). A fact whose
origin is not known for sure (its thread deleted, a thread without a key (anonymous, or its
key since deleted), a thread whose user is not the scope's name, a delegated call whose
conversation named no user) keeps ``user:<name>``: only trusted keys read it from now on.
"""

import hashlib

from django.db import migrations, models

BATCH = 500


def _origin(thread_id, threads, Thread):
    """The thread ``thread_id`` and the top thread of its delegation chain (cached reads)."""
    chain = []
    current = thread_id
    while current is not None and len(chain) < 10:  # delegation is at most 3 deep
        if current not in threads:
            threads[current] = (Thread.objects.filter(pk=current)
                                .values("api_key_id", "user", "parent_message__thread_id")
                                .first())
        row = threads[current]
        if row is None:
            return None, None
        chain.append(row)
        current = row["parent_message__thread_id"]
    if not chain or current is not None:
        return None, None
    return chain[0], chain[-1]


def key_scoped(apps, schema_editor):
    Memory = apps.get_model("agents", "Memory")
    Thread = apps.get_model("agents", "Thread")
    threads = {}
    seen = set()
    changed, duplicates = [], []
    rows = Memory.objects.filter(scope__startswith="user:").order_by("pk")
    for row in rows.iterator(chunk_size=BATCH):
        name = row.scope[len("user:"):]
        row.user = name[:300]
        learnt, top = (_origin(row.thread_id, threads, Thread) if row.thread_id
                       else (None, None))
        if learnt is not None and learnt["user"] == name and learnt["api_key_id"] is not None:
            user = top["user"] if learnt is not top else name  # a callee: the caller's user
            if user:
                row.scope = f"key:{learnt['api_key_id']}/user:{user}"
                row.user = user[:300]
        fact = (row.agent_id, row.scope, hashlib.sha256(row.text.encode()).digest())
        if fact in seen:  # the same fact twice in one scope now: stored once
            duplicates.append(row.pk)
            continue
        seen.add(fact)
        changed.append(row)
        if len(changed) >= BATCH:
            Memory.objects.bulk_update(changed, ["scope", "user"])
            changed = []
    Memory.objects.bulk_update(changed, ["scope", "user"])
    for start in range(0, len(duplicates), BATCH):
        Memory.objects.filter(pk__in=duplicates[start:start + BATCH]).delete()


def unscoped(apps, schema_editor):
    """Back to ``user:<name>`` for every fact about a user (as before: any key reads it)."""
    Memory = apps.get_model("agents", "Memory")
    changed = []
    for row in Memory.objects.exclude(user="").order_by("pk").iterator(chunk_size=BATCH):
        row.scope = f"user:{row.user}"
        changed.append(row)
        if len(changed) >= BATCH:
            Memory.objects.bulk_update(changed, ["scope"])
            changed = []
    Memory.objects.bulk_update(changed, ["scope"])


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0026_tallies_kept_by_triggers'),
    ]

    operations = [
        migrations.AddField(
            model_name='apikey',
            name='users_across_keys',
            field=models.BooleanField(default=False, help_text="The end users this key names (the request's user field or a user header) are the same people whichever key names them: its turns read every key's facts about a user and write to the memory every trusted key shares. Off: a user this key names is its own (alice of this key is not alice of another key).", verbose_name='trusted to speak for users across keys'),
        ),
        migrations.AddField(
            model_name='memory',
            name='user',
            field=models.CharField(blank=True, default='', editable=False, help_text='The end user the fact is about, whichever key named them (empty: a key\'s own memory).', max_length=300),
        ),
        migrations.AlterField(
            model_name='memory',
            name='scope',
            field=models.CharField(max_length=340),
        ),
        migrations.RunPython(key_scoped, unscoped, elidable=False),
        migrations.AddIndex(
            model_name='memory',
            index=models.Index(fields=['agent', 'user'], name='memory_agent_user'),
        ),
    ]
