from django.db import migrations, models


class Migration(migrations.Migration):
    """The thread's Message-ID rules, once the data migration has filled the column."""

    dependencies = [
        ('desk', '0005_thread_data'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='ticketmessage',
            index=models.Index(condition=models.Q(('message_id', ''), _negated=True), fields=['message_id'], name='thread_message_id'),
        ),
        migrations.AddConstraint(
            model_name='ticketmessage',
            constraint=models.UniqueConstraint(condition=models.Q(('message_id', ''), _negated=True), fields=('ticket', 'message_id'), name='thread_message_id_once_per_ticket'),
        ),
    ]
