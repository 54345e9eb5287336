from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies: list = []

    operations = [
        migrations.CreateModel(
            name="Worker",
            fields=[
                ("executor_id", models.CharField(max_length=128, primary_key=True, serialize=False)),
                ("incarnation", models.UUIDField(blank=True, null=True)),
                ("app_version", models.CharField(blank=True, default="", max_length=128)),
                ("host", models.CharField(blank=True, default="", max_length=255)),
                ("pid", models.IntegerField(blank=True, null=True)),
                ("started_at", models.DateTimeField(blank=True, null=True)),
                ("last_seen", models.DateTimeField(blank=True, null=True)),
                ("stopped_at", models.DateTimeField(blank=True, null=True)),
                ("taken_over_at", models.DateTimeField(blank=True, null=True)),
                ("taken_over_by", models.CharField(blank=True, default="", max_length=128)),
                ("runs_taken_over", models.IntegerField(default=0)),
            ],
            options={"ordering": ["executor_id"]},
        ),
    ]
