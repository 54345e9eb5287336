from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agent", "0013_prompt_versions"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="waiting_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="run",
            name="wait_reason",
            field=models.CharField(blank=True, db_default="", default="", max_length=200),
        ),
    ]
