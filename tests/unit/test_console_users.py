"""Console users, roles and generated logins (console/users.py, core/credentials.py)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from planloop.config.settings import Settings
from planloop.console.users import (
    Role,
    User,
    configured_users,
    console_login,
    login_notice,
    parse_users,
    verify,
)
from planloop.core.credentials import flower_login, is_loopback, kept_flower_login
from planloop.core.errors import CredentialsError
from planloop.producer.cli.users import write_users
from tests.console_users import cheap_hash


def settings(tmp_path: Path, **values: object) -> Settings:
    return Settings(secrets_dir=str(tmp_path / "secrets"), **values)  # type: ignore[arg-type]


def test_each_role_allows_what_the_ones_before_it_allow() -> None:
    assert Role.ADMIN.allows(Role.OPERATOR)
    assert Role.OPERATOR.allows(Role.VIEWER)
    assert not Role.VIEWER.allows(Role.OPERATOR)
    assert not Role.OPERATOR.allows(Role.ADMIN)


def test_users_entries_are_read_and_a_bad_one_is_named_without_its_hash() -> None:
    digest = cheap_hash("correct horse battery")
    users = parse_users(f"ada:admin:{digest}\n# a comment\n otto:operator:{digest}", "here")
    assert {n: u.role for n, u in users.items()} == {"ada": Role.ADMIN, "otto": Role.OPERATOR}
    assert verify(users["ada"], "correct horse battery")
    assert not verify(users["ada"], "wrong")
    for bad, why in (
        (f"ada:root:{digest}", "role"),
        ("ada:admin:plaintext-password", "not an argon2 hash"),
        (f"a d:admin:{digest}", "entry"),
        (f"ada:admin:{digest} ada:viewer:{digest}", "listed twice"),
    ):
        with pytest.raises(CredentialsError, match=why) as caught:
            parse_users(bad, "here")
        assert "plaintext-password" not in str(caught.value)
        assert digest not in str(caught.value)


def test_the_users_setting_wins_over_the_file(tmp_path: Path) -> None:
    path = tmp_path / "users.txt"
    write_users(path, User("ada", Role.VIEWER, cheap_hash("x" * 12)))
    write_users(path, User("bob", Role.OPERATOR, cheap_hash("y" * 12)))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    inline = SecretStr(f"ada:admin:{cheap_hash('z' * 12)}")
    found = configured_users(settings(tmp_path, console_users=inline, console_users_file=str(path)))
    assert {n: u.role for n, u in found.items()} == {"ada": Role.ADMIN, "bob": Role.OPERATOR}


def test_no_users_on_loopback_make_one_admin_password_reused_after(tmp_path: Path) -> None:
    first = console_login(settings(tmp_path), "127.0.0.1")
    assert first.generated is not None
    assert first.generated.created
    assert first.generated.password in login_notice(first)
    assert stat.S_IMODE(first.generated.path.stat().st_mode) == 0o600
    assert verify(first.users["admin"], first.generated.password)
    assert not verify(first.users["admin"], "planloop")
    again = console_login(settings(tmp_path), "localhost")
    assert again.generated is not None
    assert not again.generated.created
    assert again.generated.password == first.generated.password
    assert first.generated.password not in login_notice(again)


def test_a_kept_password_others_could_read_is_narrowed_to_0600(tmp_path: Path) -> None:
    first = console_login(settings(tmp_path), "127.0.0.1")
    assert first.generated is not None
    first.generated.path.chmod(0o644)
    console_login(settings(tmp_path), "127.0.0.1")
    assert stat.S_IMODE(first.generated.path.stat().st_mode) == 0o600


@pytest.mark.parametrize("address", ["0.0.0.0", "192.0.2.7", "::", "console.example"])
def test_no_credentials_on_another_address_are_refused(tmp_path: Path, address: str) -> None:
    with pytest.raises(CredentialsError, match="without credentials"):
        console_login(settings(tmp_path), address)
    with pytest.raises(CredentialsError, match="without credentials"):
        flower_login("", tmp_path / "secrets", address)
    assert not (tmp_path / "secrets").exists()


def test_loopback_addresses() -> None:
    assert all(is_loopback(a) for a in ("127.0.0.1", "127.3.4.5", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(a) for a in ("0.0.0.0", "10.0.0.1", "example.com", ""))


def test_flower_keeps_its_own_login_apart_from_the_consoles(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets"
    assert flower_login("ops:long-secret", secrets, "0.0.0.0").basic_auth == "ops:long-secret"
    with pytest.raises(CredentialsError, match="user:password"):
        flower_login("just-a-password", secrets, "127.0.0.1")
    made = flower_login("", secrets, "127.0.0.1")
    user, _, password = made.basic_auth.partition(":")
    assert user == "flower"
    assert len(password) >= 32
    assert password in made.notice
    assert kept_flower_login("", secrets) == made.basic_auth
    assert flower_login("", secrets, "127.0.0.1").basic_auth == made.basic_auth
    console = console_login(settings(tmp_path), "127.0.0.1")
    assert console.generated is not None
    assert console.generated.password != password


def test_the_default_settings_hold_no_credential() -> None:
    defaults = Settings()
    assert defaults.flower_basic_auth.get_secret_value() == ""
    assert defaults.console_users.get_secret_value() == ""
