"""Account services: join codes, student sign-up, logins (one-time passwords, trusted
browsers) and roster import.

Every function validates before it writes and writes inside one transaction, so a refused
sign-up or a roster with one bad line leaves nothing behind.
"""

from __future__ import annotations

import csv
import io
import secrets
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone
from django.utils.formats import date_format

from lab_project.login_limits import (
    device_cookie_value,
    device_lifetime,
    device_tokens,
    password_check,
    token_hash,
)
from labs.models import Classroom, LoginDevice, Membership, OneTimePassword, generate_join_code

INSTRUCTORS_GROUP = "Instructors"
ROSTER_MAX_ROWS = 500
# No l/1, o/0: passwords are read aloud or off paper.
PASSWORD_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # noqa: S105


class JoinCodeError(ValueError):
    """A join code that names no class, or whose class stopped accepting it."""


def normalize_join_code(code: str) -> str:
    return "".join(code.split()).upper()


def classroom_for_join_code(code: str, *, now=None) -> Classroom:
    """The class whose join code is ``code`` (case and spaces ignored).

    Raises JoinCodeError with a sentence a student can act on when no class has the code or
    the code has expired.
    """
    normalized = normalize_join_code(code)
    classroom = Classroom.objects.filter(join_code=normalized).first()
    if classroom is None:
        raise JoinCodeError("No class has this join code. Check it with your instructor.")
    if classroom.join_code_is_expired(now):
        when = date_format(timezone.localtime(classroom.join_code_expires_at), "DATETIME_FORMAT")
        raise JoinCodeError(f"This join code expired on {when}. Ask your instructor for a new one.")
    return classroom


def student_signup(
    *,
    username: str,
    password: str,
    join_code: str,
    first_name: str = "",
    last_name: str = "",
    email: str = "",
):
    """Create a student account and enrol it in the class that ``join_code`` names.

    The password must already be validated (the form does it with the user's attributes).
    Raises JoinCodeError for a wrong or expired code; nothing is created then.
    """
    User = get_user_model()
    with transaction.atomic():
        classroom = classroom_for_join_code(join_code)
        user = User(username=username, first_name=first_name, last_name=last_name, email=email)
        user.set_password(password)
        user.save()
        Membership.objects.create(user=user, classroom=classroom, role=Membership.Role.STUDENT)
    return user


@dataclass(frozen=True)
class JoinResult:
    classroom: Classroom
    #: False when the student was already in the class (nothing changed).
    joined: bool


def student_join_class(*, user, join_code: str) -> JoinResult:
    """Enrol the signed-in student ``user`` in the class that ``join_code`` names.

    Idempotent: a student already in that class stays as they are (``joined`` is False).
    Raises JoinCodeError for a wrong or expired code, and for an instructor (staff or an
    instructor of any class): instructors are enrolled by an administrator, never by a code.
    """
    classroom = classroom_for_join_code(join_code)
    teaches = Membership.objects.filter(user=user, role=Membership.Role.INSTRUCTOR).exists()
    if user.is_staff or teaches:
        raise JoinCodeError(
            "Instructors are added to a class by an administrator, not with a join code."
        )
    with transaction.atomic():
        _, created = Membership.objects.get_or_create(
            user=user, classroom=classroom, defaults={"role": Membership.Role.STUDENT}
        )
    return JoinResult(classroom=classroom, joined=created)


def classroom_regenerate_join_code(*, classroom: Classroom) -> str:
    """Give ``classroom`` a fresh join code (the old one stops working at once)."""
    for _ in range(10):
        code = generate_join_code()
        if not Classroom.objects.filter(join_code=code).exists():
            break
    classroom.join_code = code
    classroom.save(update_fields=["join_code"])
    return code


#: The model permissions an instructor needs in the admin (the group's migration grants the
#: same set; the admin scopes every row to the instructor's own classes).
INSTRUCTOR_PERMISSIONS = [
    f"{action}_{model}"
    for model, actions in (
        ("classroom", ("view", "change", "add")),
        ("membership", ("view", "change", "add", "delete")),
        ("scenario", ("view",)),
        ("labsession", ("view", "change")),
        ("burst", ("view",)),
        ("journalevent", ("view",)),
        # What the dashboard lets an instructor do with their class's shared dependency.
        ("shareddependencyconfig", ("view", "add", "change")),
    )
    for action in actions
]


class TeachingBackend:
    """An authentication backend that authenticates nobody and grants the admin permissions
    of ``INSTRUCTOR_PERMISSIONS`` to an active staff user who teaches a class: the admin
    lets an instructor do what the dashboard does because they teach, not only because a
    group row says so (a group whose permissions were deleted, or a flushed database whose
    data migrations did not run again, would otherwise answer 403). The admin's
    ``InstructorScopedAdmin`` still limits every page to the classes they teach."""

    def authenticate(self, request, **credentials):
        return None

    def _teaches(self, user) -> bool:
        if not (user.is_active and user.is_staff) or user.is_anonymous:
            return False
        cached = getattr(user, "_teaching_cache", None)
        if cached is None:
            cached = Membership.objects.filter(
                user=user, role=Membership.Role.INSTRUCTOR
            ).exists()
            user._teaching_cache = cached
        return cached

    def has_perm(self, user, perm: str, obj=None) -> bool:
        app_label, _, codename = perm.partition(".")
        return app_label == "labs" and codename in INSTRUCTOR_PERMISSIONS and self._teaches(user)

    def has_module_perms(self, user, app_label: str) -> bool:
        return app_label == "labs" and self._teaches(user)


def instructors_group() -> Group:
    """The Instructors group, with its permissions: recreated whole if someone deleted it
    (or a test database was flushed), and given any permission of the list it lacks, so an
    instructor never lands in an admin that refuses a page the dashboard lets them use."""
    group, _ = Group.objects.get_or_create(name=INSTRUCTORS_GROUP)
    held = set(group.permissions.values_list("codename", flat=True))
    if not set(INSTRUCTOR_PERMISSIONS) <= held:
        group.permissions.add(
            *Permission.objects.filter(
                content_type__app_label="labs", codename__in=INSTRUCTOR_PERMISSIONS
            )
        )
    return group


def instructor_enrol(*, user, classroom: Classroom) -> Membership:
    """Make ``user`` an instructor of ``classroom``: staff, in the Instructors group."""
    if not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    user.groups.add(instructors_group())
    membership, _ = Membership.objects.update_or_create(
        user=user, classroom=classroom, defaults={"role": Membership.Role.INSTRUCTOR}
    )
    return membership


# --- Logging in with a one-time password ------------------------------------------------


class LoginRefused(ValueError):
    """The password that was checked is no longer the account's (a one-time password used up
    by a login a moment earlier): the login is refused as a wrong password would be."""


def account_login(*, user) -> bool:
    """Prepare ``user``, just authenticated, to be logged in. Returns True when the password
    was a roster's one-time password: it is used up now (the account has no usable password
    until the student chooses one, so a second login with it fails) and the caller asks for
    a new one before anything else.

    Locks the user row, so of two logins racing with the same one-time password only the
    first gets in; the second finds the password changed since it was checked and raises
    LoginRefused.
    """
    User = get_user_model()
    with transaction.atomic():
        current = User.objects.select_for_update().filter(pk=user.pk).first()
        if current is None or current.password != user.password:
            raise LoginRefused("The password changed while it was being checked.")
        used, _ = OneTimePassword.objects.filter(user=current).delete()
        if not used:
            return False
        current.set_unusable_password()
        current.save(update_fields=["password"])
    user.password = current.password
    return True


def account_trust_browser(*, user, cookie: str | None) -> str:
    """Trust the browser ``user`` just proved their password on, for ``user``: a fresh token
    replaces the one the browser held for them (its failures start again at none), beside the
    tokens it holds for up to ``LAB_LOGIN_DEVICE_NAMES - 1`` other names (the latest ones; the
    rest are forgotten). ``cookie`` is the browser's device cookie, if any. Returns the
    cookie's new value. Forgets every trusted browser older than the cookie's lifetime too.
    """
    now = timezone.now()
    token = secrets.token_urlsafe(16)
    held = {token_hash(t): t for t in device_tokens(cookie)}
    with transaction.atomic():
        LoginDevice.objects.filter(created_at__lt=now - device_lifetime()).delete()
        LoginDevice.objects.filter(user=user, token_hash__in=held).delete()
        alive = set(
            LoginDevice.objects.filter(token_hash__in=held).values_list("token_hash", flat=True)
        )
        others = [held[h] for h in held if h in alive]
        keep = settings.LAB_LOGIN_DEVICE_NAMES - 1
        dropped, others = (others[:-keep], others[-keep:]) if keep else (others, [])
        LoginDevice.objects.filter(token_hash__in=[token_hash(t) for t in dropped]).delete()
        LoginDevice.objects.create(
            user=user,
            token_hash=token_hash(token),
            password_check=password_check(user),
            created_at=now,
        )
    return device_cookie_value([*others, token])


def account_set_password(*, user, password: str) -> None:
    """Give ``user`` the password they chose (already validated by the form); a one-time
    password still pending is dropped with it."""
    with transaction.atomic():
        user.set_password(password)
        user.save(update_fields=["password"])
        OneTimePassword.objects.filter(user=user).delete()


# --- Roster import ------------------------------------------------------------------------


@dataclass(frozen=True)
class RosterRow:
    line: int
    username: str
    full_name: str
    email: str

    @property
    def first_name(self) -> str:
        return self.full_name.split(None, 1)[0] if self.full_name else ""

    @property
    def last_name(self) -> str:
        parts = self.full_name.split(None, 1)
        return parts[1] if len(parts) > 1 else ""


@dataclass(frozen=True)
class RosterAccount:
    """A created account with its one-time password (plaintext: never stored)."""

    username: str
    full_name: str
    email: str
    password: str


class RosterError(ValueError):
    """A roster with bad lines; ``errors`` lists one message per bad line, by line number."""

    def __init__(self, errors: list[str]):
        super().__init__("; ".join(errors))
        self.errors = errors


def generate_password(length: int = 12) -> str:
    """A random one-time password, grouped in fours for reading off a sheet: ``abcd-efgh-jkmn``."""
    raw = "".join(secrets.choice(PASSWORD_ALPHABET) for _ in range(length))
    return "-".join(raw[i : i + 4] for i in range(0, length, 4))


def _looks_like_header(cells: list[str]) -> bool:
    return bool(cells) and cells[0].strip().lower() in {"username", "user", "login"}


#: The separators a roster may use, with their names in messages (Excel writes semicolons
#: where the comma is the decimal mark; "Save as text" writes tabs).
SEPARATORS = {",": "commas", ";": "semicolons", "\t": "tabs"}
ROSTER_COLUMNS = 3


def _rows(text: str, separator: str) -> list[tuple[int, list[str]]]:
    """(line number, cells) of every non-blank row of ``text`` split at ``separator``."""
    reader = csv.reader(io.StringIO(text), delimiter=separator)
    out = []
    for cells in reader:
        if cells and any(c.strip() for c in cells):
            out.append((reader.line_num, cells))
    return out


def _other_separator(text: str) -> str | None:
    """The character that most likely separates the columns of ``text``'s first line when it
    is none of the accepted ones (``|``, ``:``), to name it in the message; None if none."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    counts = {
        ch: first.count(ch)
        for ch in set(first)
        if not ch.isalnum() and ch not in " @._-'\"" and ch not in SEPARATORS
    }
    candidates = [ch for ch, n in counts.items() if n >= ROSTER_COLUMNS - 1]
    return max(candidates, key=lambda ch: (counts[ch], ch)) if candidates else None


def roster_separator(text: str) -> str | None:
    """The separator of a roster: the one of comma, semicolon and tab that splits the most
    rows into exactly three columns; failing that, the one that splits the most rows at all
    (so a row's wrong column count can be reported in its terms); a comma first when two do
    equally well. None when none of them splits any row: the separator is something else."""
    for wanted in (lambda n: n == ROSTER_COLUMNS, lambda n: n > 1):
        best, best_rows = None, 0
        for separator in SEPARATORS:
            fitting = sum(1 for _, cells in _rows(text, separator) if wanted(len(cells)))
            if fitting > best_rows:
                best, best_rows = separator, fitting
        if best is not None:
            return best
    return None


def roster_parse(text: str) -> list[RosterRow]:
    """Parse a roster CSV (username, full name, email; a header row is optional), its columns
    separated by commas, semicolons or tabs (found by :func:`roster_separator`).

    Returns the rows, or raises RosterError listing every bad line by its number (1-based,
    as a spreadsheet counts): wrong number of columns (naming the separator found), malformed
    or taken username, a username repeated in the file, a malformed email, a missing name.
    A roster whose separator is none of the three is refused naming the character it seems
    to use. Blank lines are skipped.
    """
    User = get_user_model()
    username_validator = UnicodeUsernameValidator()
    max_length = User._meta.get_field("username").max_length
    errors: list[str] = []
    rows: list[RosterRow] = []
    first_line_seen: dict[str, int] = {}

    separator = roster_separator(text)
    if separator is None and _rows(text, ","):
        other = _other_separator(text)
        seen = f"its lines seem to use {other!r} instead" if other else "each line is one column"
        raise RosterError(
            [
                "The roster's columns could not be told apart: separate username, full name "
                f"and email with commas, semicolons or tabs ({seen})."
            ]
        )
    separator = separator or ","
    for index, (line, cells) in enumerate(_rows(text, separator)):
        if index == 0 and _looks_like_header(cells):
            continue
        if len(cells) != ROSTER_COLUMNS:
            errors.append(
                f"Line {line}: expected 3 columns (username, full name, email) separated by "
                f"{SEPARATORS[separator]}, got {len(cells)}."
            )
            continue
        username, full_name, email = (c.strip() for c in cells)
        problems: list[str] = []
        if not username:
            problems.append("the username is empty")
        elif len(username) > max_length:
            problems.append(f"the username is longer than {max_length} characters")
        else:
            try:
                username_validator(username)
            except ValidationError:
                problems.append(
                    f"the username {username!r} may contain only letters, digits and @.+-_"
                )
        if not full_name:
            problems.append("the full name is empty")
        if email:
            try:
                validate_email(email)
            except ValidationError:
                problems.append(f"{email!r} is not a valid email address")
        key = username.lower()
        if username and key in first_line_seen:
            problems.append(
                f"the username {username!r} already appears on line {first_line_seen[key]}"
            )
        elif username:
            first_line_seen[key] = line
        if problems:
            errors.append(f"Line {line}: " + "; ".join(problems) + ".")
            continue
        rows.append(RosterRow(line=line, username=username, full_name=full_name, email=email))

    if rows:
        taken = set(
            User.objects.filter(username__in=[r.username for r in rows]).values_list(
                "username", flat=True
            )
        )
        for row in rows:
            if row.username in taken:
                errors.append(f"Line {row.line}: the username {row.username!r} is already taken.")
    if not rows and not errors:
        errors.append("The roster has no student rows.")
    if len(rows) > ROSTER_MAX_ROWS:
        errors.append(f"The roster has {len(rows)} rows; at most {ROSTER_MAX_ROWS} at a time.")
    if errors:
        errors.sort(key=_line_number)
        raise RosterError(errors)
    return rows


def _line_number(message: str) -> int:
    if message.startswith("Line "):
        number = message[5:].split(":", 1)[0]
        if number.isdigit():
            return int(number)
    return 10**9


def roster_import(*, classroom: Classroom, text: str) -> list[RosterAccount]:
    """Create a student account per roster row, enrolled in ``classroom``.

    All or nothing: a bad line raises RosterError before anything is written, and a clash
    discovered while writing (a username taken meanwhile) rolls the whole import back.
    Returns the accounts with their generated one-time passwords; the caller shows them once
    and must not persist them (only the password hashes are stored). Each password logs in
    once (:func:`account_login`), then the student chooses their own.
    """
    User = get_user_model()
    rows = roster_parse(text)
    accounts: list[RosterAccount] = []
    with transaction.atomic():
        for row in rows:
            password = generate_password()
            user = User(
                username=row.username,
                first_name=row.first_name,
                last_name=row.last_name,
                email=row.email,
            )
            user.set_password(password)
            user.save()
            OneTimePassword.objects.create(user=user)
            Membership.objects.create(user=user, classroom=classroom, role=Membership.Role.STUDENT)
            accounts.append(
                RosterAccount(
                    username=row.username,
                    full_name=row.full_name,
                    email=row.email,
                    password=password,
                )
            )
    return accounts


def roster_accounts_csv(accounts: list[RosterAccount] | list[dict]) -> str:
    """The accounts as CSV (username, full name, email, password) for the one download."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["username", "full name", "email", "password"])
    for acc in accounts:
        if isinstance(acc, dict):
            cells = [acc["username"], acc["full_name"], acc["email"], acc["password"]]
        else:
            cells = [acc.username, acc.full_name, acc.email, acc.password]
        writer.writerow([_spreadsheet_safe(c) for c in cells])
    return out.getvalue()


def _spreadsheet_safe(cell: str) -> str:
    # A cell starting with = + - @ is a formula to a spreadsheet (CSV injection).
    return f"'{cell}" if cell[:1] in {"=", "+", "-", "@"} else cell
