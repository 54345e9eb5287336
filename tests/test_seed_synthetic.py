"""`seed --synthetic N` adds finished runs for realistic volume."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agent.models import OPEN_STATUSES, Run, Step


@pytest.mark.django_db
def test_seed_synthetic_adds_n_finished_runs_with_steps(seeded):
    call_command("seed", "--synthetic", "25", verbosity=0)
    assert Run.objects.count() == 25
    assert not Run.objects.filter(status__in=OPEN_STATUSES).exists()
    assert Step.objects.count() >= 25


@pytest.mark.django_db
def test_seed_synthetic_refuses_a_non_positive_count(seeded):
    with pytest.raises(CommandError, match="positive"):
        call_command("seed", "--synthetic", "0")
