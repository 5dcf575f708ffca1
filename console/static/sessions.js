// The sessions list, refreshed every two seconds.
"use strict";

async function refresh() {
  const error = document.getElementById("error");
  try {
    const { sessions } = await getJSON("/api/sessions?limit=100");
    const body = document.querySelector("#sessions tbody");
    body.replaceChildren(...sessions.map((s) => el("tr", { "data-sid": s.id },
      el("td", {}, el("a", { href: "/sessions/" + encodeURIComponent(s.id) }, s.id)),
      el("td", {}, badge(s.status), s.awaiting ? " (awaiting " + s.awaiting + ")" : ""),
      el("td", {}, el("progress", { max: Math.max(1, s.steps_total), value: s.steps_done }),
        " " + s.steps_done + "/" + s.steps_total),
      el("td", {}, ageText(s.age_s)),
      el("td", {}, s.replans),
      el("td", {}, s.tokens),
      el("td", {}, "$" + Number(s.cost_usd).toFixed(4)),
      el("td", {}, s.goal))));
    document.getElementById("empty").hidden = sessions.length > 0;
    error.hidden = true;
  } catch (exc) {
    error.textContent = "cannot list sessions: " + exc.message;
    error.hidden = false;
  }
}

whoAmI().catch(() => {});
refresh();
setInterval(refresh, 2000);
