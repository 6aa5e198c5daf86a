// Who is signed in: the shell (`app.js`) sets it, pages read it to offer only what
// the role may do (the server checks every request all the same).

let user = null;

/** Records the signed-in user (`user_info`'s answer), or `null` once signed out. */
export function setUser(signedIn) {
  user = signedIn;
}

/** Whether the signed-in user is a super user. */
export function isSuperUser() {
  return Boolean(user?.role?.permission?.super_user);
}
