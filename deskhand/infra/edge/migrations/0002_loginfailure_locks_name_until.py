from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("edge", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="loginfailure",
            name="locks_name_until",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
