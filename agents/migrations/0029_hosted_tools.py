"""Hosted tools left out, by policy (issue 36): an agent's and a key's ``hosted_tools``
(drop or refuse), an agent's ``provides`` (its tools that serve a hosted tool), and the hosted
tools a stored reply left out (``Message.dropped_tools``)."""

from django.db import migrations, models

HELP = ("A hosted tool a client sends (OpenAI's web_search, file_search..., Anthropic's server "
        "tools) that none of the agent's tools provides: dropped (left out of what reaches the "
        "model; the reply names it in X-Gaia-Dropped-Tools) or refused (400 unsupported_tool).")
CHOICES = [("drop", "drop (left out, the reply says so)"), ("refuse", "refuse (400)")]


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0028_tool_call_limits'),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="hosted_tools",
            field=models.CharField(choices=CHOICES, default="drop", help_text=HELP,
                                   max_length=10),
        ),
        migrations.AddField(
            model_name="agent",
            name="provides",
            field=models.JSONField(
                blank=True, default=dict,
                help_text='Hosted tools the agent\'s own tools serve: {"web_search": '
                '"mcp__search__search"} (a tool of its list, as the model sees it). A client '
                "that sends web_search then gets that tool's calls as web search (Responses "
                "web_search_call items)."),
        ),
        migrations.AddField(
            model_name="apikey",
            name="hosted_tools",
            field=models.CharField(choices=CHOICES, default="drop",
                                   help_text=HELP + " Refused if the key or the agent says "
                                   "refuse.", max_length=10),
        ),
        migrations.AddField(
            model_name="message",
            name="dropped_tools",
            field=models.JSONField(
                blank=True, null=True,
                help_text="Hosted tools the client sent that no tool of the agent provides, "
                "left out of what reached the model (agents.tools.hosted)."),
        ),
    ]
