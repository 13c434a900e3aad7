"""The built-in suite: the 30 HotpotQA dev questions shipped in mesh/data (CC BY-SA 4.0)."""

import json
from pathlib import Path

from django.db import migrations

NAME = "hotpotqa-dev-30"


def create(apps, schema_editor):
    Suite = apps.get_model("benchmarks", "BenchmarkSuite")
    if Suite.objects.filter(name=NAME).exists():
        return
    path = Path(__file__).resolve().parents[2] / "mesh" / "data" / "hotpotqa-dev-30.json"
    questions = json.loads(path.read_text(encoding="utf-8"))
    Suite.objects.create(
        name=NAME, builtin=True, questions=questions, question_count=len(questions),
        description="30 HotpotQA dev questions (distractor setting). The deterministic mesh "
        "tools were written against these: their scores here are a baseline.",
        source="HotpotQA dev set, Yang et al., EMNLP 2018 (hotpotqa.github.io)",
        licence="CC BY-SA 4.0")


def remove(apps, schema_editor):
    apps.get_model("benchmarks", "BenchmarkSuite").objects.filter(name=NAME, builtin=True).delete()


class Migration(migrations.Migration):
    dependencies = [("benchmarks", "0001_bench_initial")]
    operations = [migrations.RunPython(create, remove)]
